"""A standalone Apache Flink cluster on localhost, and Beam's Flink job server, for the engine tests.

Everything comes from package registries and is kept in the clone's `.cache/engines/` (gitignored),
made once and reused by later runs:

- Flink's `bin/` scripts from the `apache-flink` wheel and its `lib/` jars (`flink-dist`...) from
  the `apache-flink-libraries` archive on PyPI: a Flink home like the one Flink's own download
  unpacks to, whose `jobmanager.sh` and `taskmanager.sh` start each process of the cluster.
- Beam's Flink job server: the published `beam-runners-flink-1.19-job-server` jar is not served
  by the Maven registry reachable here, but the runner it is made of (`beam-runners-flink-1.19`)
  and all its dependencies are. Maven resolves them (into its own cache, ~/.m2) and a jar here
  holds no classes, only a manifest that names the job server's main class and those jars.
- A virtualenv with the apache-beam that matches that job server, and this package (editable).

The newest Beam whose Flink runner resolves whole there is BEAM_VERSION (see docs/clusters/flink.md
for what was asked of the registry, and its answers). The Python SDK and the job server must be
the same Beam release, so the engine runs in that virtualenv, not the test suite's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from local_ports import free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "engines"

BEAM_VERSION = "2.62.0"
FLINK_MINOR = "1.19"
# The Flink that beam-runners-flink-1.19 2.62.0 is built against (its flink-clients dependency).
FLINK_VERSION = "1.19.0"
JOB_SERVER_MAIN = "org.apache.beam.runners.flink.FlinkJobServerDriver"

_HOST = "localhost"
_START_SECONDS = 180  # bounds on a process that never comes up, not speed goals
_SETUP_SECONDS = 1800


class EngineSetupError(RuntimeError):
    """A part of the engine could not be fetched or made; the message names the log."""


def _run(command: list[str], log: Path, *, cwd: Path | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(command)}\n".encode())
        out.flush()
        done = subprocess.run(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            timeout=_SETUP_SECONDS,
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise EngineSetupError(f"{command[0]} failed ({done.returncode}); see {log}:\n{tail}")


def _made(marker: Path, make) -> Path:
    """`marker`'s folder, made by `make(folder)` unless a finished one is there already: the
    marker is written last, so a half-made folder (an interrupted run) is made again."""
    folder = marker.parent
    if marker.exists():
        return folder
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    make(folder)
    marker.write_text("made\n")
    return folder


def beam_python() -> Path:
    """The python of a virtualenv with apache-beam BEAM_VERSION and this package."""

    def make(folder: Path) -> None:
        log = CACHE / "logs" / "venv.log"
        _run([sys.executable, "-m", "venv", str(folder)], log)
        pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "-q"]
        _run([*pip, f"apache-beam=={BEAM_VERSION}", "-e", str(REPO)], log)

    return _made(CACHE / f"beam-{BEAM_VERSION}" / ".made", make) / "bin" / "python"


def _pip_download(requirement: str, into: Path, *extra: str) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    before = set(into.iterdir())
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(into)]
    _run([*command, *extra, requirement], CACHE / "logs" / "downloads.log")
    name = requirement.split("==")[0].replace("-", "_").lower()
    found = [p for p in into.iterdir() if p.name.replace("-", "_").lower().startswith(name)]
    new = [p for p in found if p not in before]
    return (new or found)[0]


def flink_home() -> Path:
    """A Flink FLINK_VERSION home: `bin/` scripts, `lib/` jars, and `conf/` log settings."""

    def make(home: Path) -> None:
        downloads = CACHE / "downloads"
        # The wheel's scripts are the same on every platform: ask for one that exists.
        wheel = _pip_download(
            f"apache-flink=={FLINK_VERSION}",
            downloads,
            "--only-binary=:all:",
            "--python-version=3.11",
            "--platform=manylinux1_x86_64",
        )
        libraries = _pip_download(f"apache-flink-libraries=={FLINK_VERSION}", downloads)
        for sub in ("bin", "lib", "conf"):
            (home / sub).mkdir()
        with zipfile.ZipFile(wheel) as whl:
            for name in whl.namelist():
                top, _, rest = name.partition("/")
                kind, _, file = rest.partition("/")
                if top == "pyflink" and kind in ("bin", "conf") and file and "/" not in file:
                    target = home / kind / file
                    target.write_bytes(whl.read(name))
                    if kind == "bin":
                        target.chmod(0o755)
        with tarfile.open(libraries) as archive:
            for member in archive.getmembers():
                parts = Path(member.name).parts
                wanted = len(parts) == 4 and parts[1] == "deps" and parts[2] in ("lib", "bin")
                if wanted and member.isfile() and parts[3].endswith(".jar"):
                    data = archive.extractfile(member)
                    (home / parts[2] / parts[3]).write_bytes(data.read())
        if not list((home / "lib").glob("flink-dist-*.jar")):
            raise EngineSetupError(f"no flink-dist jar in {libraries}")

    return _made(CACHE / f"flink-{FLINK_VERSION}" / ".made", make)


_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>beam-tfrecord.engines</groupId>
  <artifactId>flink-job-server</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.beam</groupId>
      <artifactId>beam-runners-flink-{flink_minor}</artifactId>
      <version>{beam}</version>
    </dependency>
    <dependency>
      <!-- The job server's log lines (the published job-server jar bundles it too). -->
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-simple</artifactId>
      <version>{slf4j}</version>
    </dependency>
  </dependencies>
</project>
"""


def _manifest(classpath: list[str]) -> bytes:
    """A jar manifest naming the main class and `classpath` (absolute paths), lines wrapped at
    72 bytes as the jar format requires."""
    entries = " ".join(Path(p).resolve().as_uri().removeprefix("file://") for p in classpath)
    lines = ["Manifest-Version: 1.0", f"Main-Class: {JOB_SERVER_MAIN}"]
    text = f"Class-Path: {entries}"
    wrapped = [text[:72]] + [" " + text[i : i + 71] for i in range(72, len(text), 71)]
    return ("\r\n".join([*lines, *wrapped]) + "\r\n\r\n").encode()


def job_server_jar() -> Path:
    """A jar that `java -jar` runs as Beam's Flink job server: Beam's FlinkRunner is given it
    with --flink_job_server_jar and starts it as it would the published one."""

    def make(folder: Path) -> None:
        log = CACHE / "logs" / "maven.log"
        pom = folder / "pom.xml"
        pom.write_text(_POM.format(flink_minor=FLINK_MINOR, beam=BEAM_VERSION, slf4j="1.7.36"))
        classpath = folder / "classpath.txt"
        _run(
            [
                "mvn",
                "-B",
                "-q",
                "-f",
                str(pom),
                "dependency:build-classpath",
                f"-Dmdep.outputFile={classpath}",
            ],
            log,
        )
        jars = classpath.read_text().strip().split(os.pathsep)
        with zipfile.ZipFile(folder / "job-server.jar", "w") as jar:
            jar.writestr("META-INF/MANIFEST.MF", _manifest(jars))

    folder = CACHE / f"beam-runners-flink-{FLINK_MINOR}-job-server-{BEAM_VERSION}"
    jar = _made(folder / ".made", make) / "job-server.jar"
    classpath = (jar.parent / "classpath.txt").read_text().strip().split(os.pathsep)
    if not all(Path(p).exists() for p in classpath):  # Maven's cache was cleared since
        (jar.parent / ".made").unlink()
        return job_server_jar()
    return jar


def _config(rest_port: int, rpc_port: int, tmp: Path) -> str:
    settings = {
        "jobmanager.rpc.address": _HOST,
        "jobmanager.rpc.port": rpc_port,
        "jobmanager.bind-host": _HOST,
        "jobmanager.memory.process.size": "1024m",
        "rest.address": _HOST,
        "rest.bind-address": _HOST,
        "rest.port": rest_port,
        "taskmanager.host": _HOST,
        "taskmanager.bind-host": _HOST,
        "taskmanager.memory.process.size": "1280m",
        "taskmanager.memory.managed.size": "64m",
        # Beam's batch jobs are many steps, each exchange with buffers of its own: Flink's
        # default share of memory for them fails such a job with "Insufficient number of
        # network buffers".
        "taskmanager.memory.network.min": "256m",
        "taskmanager.memory.network.max": "256m",
        # Two slots on each TaskManager, for jobs of parallelism 2: when one TaskManager is
        # killed, the other's slots take the whole job on its restart.
        "taskmanager.numberOfTaskSlots": 2,
        "parallelism.default": 2,
        # A job of parallelism 2 gets one slot on each TaskManager, so each runs a part of
        # every step (the shard writes too).
        "cluster.evenly-spread-out-slots": True,
        # A lost TaskManager restarts the job; a TaskManager killed is seen gone within
        # seconds, not the default 50.
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 10,
        "restart-strategy.fixed-delay.delay": "2 s",
        "heartbeat.interval": 1000,
        "heartbeat.timeout": 5000,
        "io.tmp.dirs": str(tmp),
    }
    return "".join(f"{key}: {json.dumps(value)}\n" for key, value in settings.items())


class FlinkCluster:
    """A JobManager and TaskManagers, each a process on localhost.

    Each TaskManager starts its Python SDK workers as its own child processes (environment
    PROCESS, through sdk_boot.py). A worker pool (EXTERNAL) is a sidecar of one TaskManager on a
    real cluster, at an address each node resolves to its own; here both TaskManagers would
    share one pool, which keys workers by an id both give their first worker ("1-1"), so one
    TaskManager's release of its worker stops the other's.
    """

    def __init__(self, run_dir: Path, python: Path, home: Path, job_server: Path):
        self.run_dir = run_dir
        self.python = python
        self.home = home
        self.job_server = job_server
        self.rest_port = free_port(_HOST)
        self.boot = run_dir / "sdk-boot"
        self.conf = run_dir / "conf"
        self.taskmanagers: list[subprocess.Popen] = []
        self._processes: list[subprocess.Popen] = []

    @property
    def master(self) -> str:
        return f"{_HOST}:{self.rest_port}"

    def job_server_flags(self) -> list[str]:
        """The flag that has the runner start the job server made here."""
        return [f"--flink_job_server_jar={self.job_server}"]

    def flags(self) -> list[str]:
        """The build's flags that run it on this cluster."""
        return [
            "--runner=FlinkRunner",
            f"--flink_master={self.master}",
            f"--flink_version={FLINK_MINOR}",
            *self.job_server_flags(),
            "--parallelism=2",
            "--environment_type=PROCESS",
            f"--environment_config={json.dumps({'command': str(self.boot)}, separators=(',', ':'))}",
        ]

    def env(self) -> dict[str, str]:
        """An environment with the engine's python first on PATH."""
        path = f"{self.python.parent}{os.pathsep}{os.environ.get('PATH', '')}"
        return {**os.environ, "PATH": path, "PYTHONWARNINGS": "ignore::FutureWarning"}

    def start(self, taskmanagers: int = 2) -> None:
        self.boot.write_text(
            f'#!/bin/sh\nexec "{self.python}" "{Path(__file__).with_name("sdk_boot.py")}" "$@"\n'
        )
        self.boot.chmod(0o755)
        self.conf.mkdir(parents=True)
        for name in ("log4j-console.properties", "logback-console.xml"):
            shutil.copy(self.home / "conf" / name, self.conf / name)
        tmp = self.run_dir / "tmp"
        tmp.mkdir()
        (self.conf / "config.yaml").write_text(_config(self.rest_port, free_port(_HOST), tmp))
        jobmanager = self._flink("jobmanager", "jobmanager.sh")
        wait_for_port(
            _HOST,
            self.rest_port,
            jobmanager,
            self.run_dir / "jobmanager",
            seconds=_START_SECONDS,
            error=EngineSetupError,
        )
        for _ in range(taskmanagers):
            self.add_taskmanager()
        self.wait_for_taskmanagers(taskmanagers)

    def _flink(self, name: str, script: str) -> subprocess.Popen:
        logs = self.run_dir / name
        logs.mkdir()
        env = {
            **os.environ,
            "FLINK_HOME": str(self.home),
            "FLINK_CONF_DIR": str(self.conf),
            "FLINK_LOG_DIR": str(logs),
            "FLINK_PID_DIR": str(logs),
            # google-auth's warnings about old grpcio and Python, in every SDK worker's log.
            "PYTHONWARNINGS": "ignore::FutureWarning",
        }
        with open(logs / "console.log", "wb") as out:
            # start-foreground execs the JVM: this process is the JobManager or TaskManager.
            process = subprocess.Popen(
                [str(self.home / "bin" / script), "start-foreground"],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                # Not the launcher's folder: a worker must not find a relative path there.
                cwd=logs,
                # A group of its own, which its SDK workers join: see kill_taskmanager.
                start_new_session=True,
            )
        self._processes.append(process)
        return process

    def add_taskmanager(self) -> subprocess.Popen:
        process = self._flink(f"taskmanager-{len(self.taskmanagers) + 1}", "taskmanager.sh")
        self.taskmanagers.append(process)
        return process

    def kill_taskmanager(self, index: int = 0) -> None:
        """Kills a TaskManager and its SDK workers at once (SIGKILL), as when its node dies."""
        os.killpg(self.taskmanagers[index].pid, signal.SIGKILL)
        self.taskmanagers[index].wait(30)

    def latest_job(self) -> str:
        """The id of the job submitted last."""
        jobs = self.rest("/jobs/overview")["jobs"]
        return max(jobs, key=lambda job: job["start-time"])["jid"]

    def rest(self, path: str) -> dict:
        """The JobManager's REST answer at `path` (`/overview`, `/jobs/overview`...)."""
        with urllib.request.urlopen(f"http://{self.master}{path}", timeout=10) as answer:
            return json.load(answer)

    def wait_for_taskmanagers(self, count: int) -> None:
        """Waits until the JobManager has exactly `count` TaskManagers registered."""
        deadline = time.monotonic() + _START_SECONDS
        seen = None
        while time.monotonic() < deadline:
            for process in self.taskmanagers:
                if process.poll() not in (None, -signal.SIGKILL):
                    raise EngineSetupError(f"a TaskManager exited; see {self.run_dir}")
            try:
                seen = self.rest("/overview")["taskmanagers"]
            except (urllib.error.URLError, OSError):
                seen = None
            if seen == count:
                return
            time.sleep(0.5)
        raise EngineSetupError(f"{seen} TaskManagers registered, not {count}; see {self.run_dir}")

    def stop(self) -> None:
        for process in reversed(self._processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self._processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
