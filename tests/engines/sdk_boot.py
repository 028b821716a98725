"""Starts one Beam Python SDK worker for a TaskManager: the PROCESS environment's command.

Beam's own `boot` program (Go, inside its SDK container) does this and more: it asks the runner's
provision service for the job's options and the worker's endpoints, installs the staged
packages, then runs `apache_beam.runners.worker.sdk_worker_main`. Here the engine's virtualenv
already has this package and apache-beam, as a custom container would, so only the first and
last steps are needed, and the last runs in this process. Each TaskManager starts its own workers with this, as its children.

Called as `sdk_boot.py --id=ID --provision_endpoint=HOST:PORT [--logging_endpoint=...]
[--control_endpoint=...] [--artifact_endpoint=...] [--semi_persist_dir=...]`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import grpc
from apache_beam.portability.api import (
    beam_provision_api_pb2,
    beam_provision_api_pb2_grpc,
    endpoints_pb2,
)
from google.protobuf import json_format, text_format


def _descriptor(url: str) -> str:
    return text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=url))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--id", required=True)
    parser.add_argument("--provision_endpoint", required=True)
    parser.add_argument("--semi_persist_dir", default=None)
    args, _ = parser.parse_known_args(argv)

    with grpc.insecure_channel(args.provision_endpoint) as channel:
        info = (
            beam_provision_api_pb2_grpc.ProvisionServiceStub(channel)
            .GetProvisionInfo(
                beam_provision_api_pb2.GetProvisionInfoRequest(),
                metadata=[("worker_id", args.id)],
                timeout=60,
            )
            .info
        )
    os.environ.update(
        {
            "WORKER_ID": args.id,
            "PIPELINE_OPTIONS": json_format.MessageToJson(info.pipeline_options),
            "CONTROL_API_SERVICE_DESCRIPTOR": _descriptor(info.control_endpoint.url),
            "LOGGING_API_SERVICE_DESCRIPTOR": _descriptor(info.logging_endpoint.url),
            "RUNNER_CAPABILITIES": " ".join(info.runner_capabilities),
            "SEMI_PERSISTENT_DIRECTORY": args.semi_persist_dir or tempfile.mkdtemp(),
        }
    )
    if info.HasField("status_endpoint"):
        os.environ["STATUS_API_SERVICE_DESCRIPTOR"] = _descriptor(info.status_endpoint.url)
    # In this process: Beam is imported already (a second interpreter would take as long again
    # to start, for each step of the job on each TaskManager).
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    main()
