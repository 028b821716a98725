"""http_get against a server of this test's own, on localhost: every way a store may answer a GET,
connections kept and dropped, time limits, and TLS."""

from __future__ import annotations

import asyncio
import ssl

import pytest
from certificates import self_signed

from beam_tfrecord import http_get
from beam_tfrecord.remote import is_transient

BODY = bytes(range(256)) * 400  # 100 KB, every byte value


class Server:
    """A raw HTTP/1.1 server: `answer(request, writer)` writes each answer; it counts the
    connections it was given and the requests it read."""

    def __init__(self, answer, tls: ssl.SSLContext | None = None):
        self.answer = answer
        self.tls = tls
        self.connections = 0
        self.requests: list[bytes] = []

    async def __aenter__(self):
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc):
        self._server.close()

    async def _serve(self, reader, writer):
        self.connections += 1
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(request)
                if await self.answer(request, writer) is False:
                    break
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            pass  # the test is over (left to run, asyncio would log its cancelling as an error)
        finally:
            writer.close()


def _run(answer, client, tls=None):
    async def both():
        async with Server(answer, tls) as server:
            return server, await client(server)

    return asyncio.run(both())


async def _plain(request, writer):
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)


TIMEOUTS = http_get.Timeouts(connect=5, read=5, total=30)


async def _get(url, path="/o", headers=None, timeouts=TIMEOUTS, **kw):
    return await http_get.get(url + path, headers or {}, timeouts, **kw)


def test_a_body_of_known_length_and_one_connection_kept_for_every_get():
    async def client(server):
        return [await _get(server.url, f"/o{i}?alt=media") for i in range(5)]

    server, answers = _run(_plain, client)
    assert answers == [(200, BODY)] * 5
    assert server.connections == 1
    assert server.requests[0].startswith(b"GET /o0?alt=media HTTP/1.1\r\nHost: 127.0.0.1:")


def test_the_headers_go_as_given_and_a_host_given_replaces_ours():
    async def client(server):
        await _get(server.url, headers={"Host": "bucket.example", "X-Amz-Date": "20261129T000000Z"})

    server, _ = _run(_plain, client)
    lines = server.requests[0].split(b"\r\n")
    assert b"Host: bucket.example" in lines and b"X-Amz-Date: 20261129T000000Z" in lines
    assert sum(line.lower().startswith(b"host:") for line in lines) == 1


def test_a_header_with_a_line_break_is_refused_before_anything_is_sent():
    async def client(server):
        with pytest.raises(ValueError, match="X-Evil"):
            await _get(server.url, headers={"X-Evil": "a\r\nInjected: yes"})

    server, _ = _run(_plain, client)
    assert server.requests == []


def test_a_chunked_body_however_it_is_cut():
    async def answer(request, writer):
        chunks = [BODY[:1000], BODY[1000:70000], BODY[70000:]]
        raw = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\nX-T: 1\r\n\r\n"
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for at in range(0, len(raw), 7919):  # pieces across chunk sizes and their line ends
            writer.write(raw[at : at + 7919])
            await writer.drain()
            await asyncio.sleep(0)

    async def client(server):
        return [await _get(server.url) for _ in range(3)]

    server, answers = _run(answer, client)
    assert answers == [(200, BODY)] * 3
    assert server.connections == 1  # the trailer read to its end: the connection is kept


def test_a_body_that_ends_with_the_connection_and_one_marked_close_are_not_kept():
    async def to_the_end(request, writer):
        writer.write(b"HTTP/1.0 200 OK\r\n\r\n" + BODY)
        return False

    async def marked_close(request, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc")
        return False

    async def client(server):
        return [await _get(server.url) for _ in range(3)]

    server, answers = _run(to_the_end, client)
    assert answers == [(200, BODY)] * 3 and server.connections == 3
    server, answers = _run(marked_close, client)
    assert answers == [(200, b"abc")] * 3 and server.connections == 3


def test_an_interim_answer_then_the_answer_and_an_error_status_with_its_body():
    async def answer(request, writer):
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nNoSuchKey")

    status, body = _run(answer, lambda server: _get(server.url))[1]
    assert (status, body) == (404, b"NoSuchKey")


def test_a_connection_the_store_closed_while_idle_is_replaced():
    async def answer(request, writer):
        await _plain(request, writer)
        await writer.drain()
        return False  # closes after each answer, though it said nothing

    async def client(server):
        answers = []
        for _ in range(3):
            answers.append(await _get(server.url))
            await asyncio.sleep(0.05)  # the close reaches the client while the connection idles
        return answers

    server, answers = _run(answer, client)
    assert answers == [(200, BODY)] * 3 and server.connections == 3


def test_a_connection_idle_too_long_is_closed_not_reused(monkeypatch):
    """Past KEEP_IDLE, a NAT may have forgotten a connection without a word: it is not used."""
    monkeypatch.setattr(http_get, "KEEP_IDLE", 0.1)

    async def client(server):
        first = await _get(server.url)
        await asyncio.sleep(0.03)
        again = await _get(server.url)  # within the limit: the same connection
        await asyncio.sleep(0.2)
        return [first, again, await _get(server.url)]

    server, answers = _run(_plain, client)
    assert answers == [(200, BODY)] * 3 and server.connections == 2


def test_a_header_value_beyond_ascii_goes_in_utf8_as_aiohttp_sends_it():
    async def client(server):
        return await _get(server.url, headers={"User-Agent": "équipe/1"})

    server, answer = _run(_plain, client)
    assert answer == (200, BODY)
    assert "User-Agent: équipe/1".encode() in server.requests[0]


def test_a_request_the_store_drops_unanswered_goes_once_more_on_a_new_connection():
    dropped = []

    async def answer(request, writer):
        if len(dropped) < 1 and b"/second" in request:
            dropped.append(request)
            return False  # the request read, the connection closed: no answer
        await _plain(request, writer)

    async def client(server):
        return [await _get(server.url, "/first"), await _get(server.url, "/second")]

    server, answers = _run(answer, client)
    assert answers == [(200, BODY)] * 2
    assert server.connections == 2 and len(server.requests) == 3


def test_a_new_connection_closed_unanswered_is_a_transient_error():
    async def answer(request, writer):
        return False

    async def client(server):
        with pytest.raises(ConnectionError) as raised:
            await _get(server.url)
        return raised.value

    err = _run(answer, client)[1]
    assert is_transient(err)


def test_a_silent_store_times_out_and_the_connection_goes():
    async def answer(request, writer):
        if len(server_requests) == 0:
            server_requests.append(request)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")  # then silence
            await asyncio.sleep(5)
            return False
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc")

    server_requests: list = []

    async def client(server):
        with pytest.raises(TimeoutError) as raised:
            await _get(server.url, timeouts=http_get.Timeouts(connect=5, read=0.2, total=None))
        return raised.value, await _get(server.url)

    server, (err, after) = _run(answer, client)
    assert is_transient(err) and "the store was silent for 0.2 s" in str(err)
    assert after == (200, b"abc") and server.connections == 2


def test_the_total_limit_holds_while_bytes_keep_coming():
    async def answer(request, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(1000):
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.01)

    async def client(server):
        with pytest.raises(TimeoutError, match=r"no whole answer in 0\.3 s"):
            await _get(server.url, timeouts=http_get.Timeouts(connect=5, read=1, total=0.3))

    _run(answer, client)


@pytest.mark.parametrize(
    "answer",
    [b"SSH-2.0-OpenSSH\r\n\r\n", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"],
    ids=["not http", "bad chunk"],
)
def test_an_answer_that_is_not_http_is_a_bad_response(answer):
    async def reply(request, writer):
        writer.write(answer)

    async def client(server):
        with pytest.raises(http_get.BadResponse) as raised:
            await _get(server.url)
        return raised.value

    assert is_transient(_run(reply, client)[1])


def test_bytes_past_the_body_and_a_cancelled_get_leave_no_connection_behind():
    async def answer(request, writer):
        if b"/extra" in request:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcSURPLUS")
        elif b"/slow" in request:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")
            await asyncio.sleep(5)
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async def client(server):
        first = await _get(server.url, "/extra")
        slow = asyncio.ensure_future(_get(server.url, "/slow"))
        await asyncio.sleep(0.1)
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        return first, await _get(server.url, "/plain")

    server, (first, after) = _run(answer, client)
    assert first == (200, b"abc") and after == (200, b"ok")
    assert server.connections == 3  # none of the first two was used again


def test_no_more_requests_in_flight_than_the_limit():
    in_flight, most = [0], [0]

    async def answer(request, writer):
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        await asyncio.sleep(0.02)
        in_flight[0] -= 1
        await _plain(request, writer)

    async def client(server):
        return await asyncio.gather(*(_get(server.url, f"/{i}", limit=3) for i in range(12)))

    server, answers = _run(answer, client)
    assert answers == [(200, BODY)] * 12
    assert most[0] == 3 and server.connections == 3


def test_over_tls_trusting_the_system_store_as_aiohttp_does(tmp_path, monkeypatch):
    cert, key = self_signed(tmp_path, "localhost")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)

    async def client(server):
        return await _get(server.url.replace("127.0.0.1", "localhost"))

    http_get._tls.cache_clear()
    try:
        with pytest.raises(ssl.SSLCertVerificationError):  # not trusted
            _run(_plain, client, tls)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        http_get._tls.cache_clear()
        assert _run(_plain, client, tls)[1] == (200, BODY)
    finally:
        http_get._tls.cache_clear()
    assert not is_transient(ssl.SSLCertVerificationError(1, "certificate verify failed"))


def test_aiohttp_time_limits_read_as_aiohttp_applies_them():
    aiohttp = pytest.importorskip("aiohttp")
    assert http_get.Timeouts.as_aiohttp(None) == http_get.Timeouts(None, None, None)
    assert http_get.Timeouts.as_aiohttp(12) == http_get.Timeouts(None, None, 12.0)
    limits = aiohttp.ClientTimeout(sock_connect=3, sock_read=60)
    assert http_get.Timeouts.as_aiohttp(limits) == http_get.Timeouts(3, 60, None)
    limits = aiohttp.ClientTimeout(total=9, connect=4)
    assert http_get.Timeouts.as_aiohttp(limits) == http_get.Timeouts(4, None, 9)


def test_a_closed_event_loop_and_its_connections_do_not_outlive_it():
    """A pool holds its loop (its connections' transports do): the loops of runs that ended,
    and their kept connections' sockets, go once another loop GETs."""
    import gc
    import weakref

    loops = []

    async def client(server):
        loops.append(weakref.ref(asyncio.get_running_loop()))
        return await _get(server.url)

    assert _run(_plain, client)[1] == (200, BODY)
    assert _run(_plain, client)[1] == (200, BODY)
    gc.collect()
    assert loops[0]() is None


def test_the_total_limit_holds_while_the_connection_is_made():
    """A GET given a total alone (aiohttp's `timeout=12`) has that long for all of it, the
    connection's making included: a store that takes the connection but never answers TLS's
    hello fails it in its total, not when asyncio gives up on the handshake a minute later."""

    async def silent(request, writer):
        await asyncio.sleep(5)

    async def client(server):
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError, match=r"no whole answer in 0\.3 s"):
            only_total = http_get.Timeouts(connect=None, read=None, total=0.3)
            await asyncio.wait_for(
                _get(server.url.replace("http:", "https:"), timeouts=only_total), 3
            )
        return loop.time() - started

    assert _run(silent, client)[1] < 2


@pytest.mark.parametrize("connect", [None, 5.0])
def test_a_connection_the_system_timed_out_is_its_error_not_our_limit(monkeypatch, connect):
    """The kernel's own give-up on a connection (ETIMEDOUT, a TimeoutError since Python 3.3)
    comes back as it is, transient: not taken for our connect limit running out, nor, with no
    such limit, a TypeError formatting it. No real network fails so within a test: the loop's
    create_connection raises what asyncio raises then."""
    import errno

    async def timed_out(*args, **kwargs):
        raise OSError(errno.ETIMEDOUT, "Connect call failed ('127.0.0.1', 9)")

    async def client(server):
        monkeypatch.setattr(asyncio.get_running_loop(), "create_connection", timed_out)
        with pytest.raises(TimeoutError) as raised:
            await _get(server.url, timeouts=http_get.Timeouts(connect=connect, total=None))
        return raised.value

    err = _run(_plain, client)[1]
    assert err.errno == errno.ETIMEDOUT and "Connect call failed" in str(err)
    assert is_transient(err)


def test_a_coded_body_is_decoded_when_asked_as_aiohttp_decodes_it_and_else_left_as_it_came():
    """gzip, or deflate with or without zlib's wrapping, as `Content-Encoding` says: decoded for
    a caller that asks (`decode=True`, what aiohttp's `response.read()` gives by default), left
    as it came for one that does not (S3's objects are their bytes as stored)."""
    import gzip
    import zlib

    raw_deflate = zlib.compressobj(wbits=-15)
    coded = {
        b"/gzip": (b"gzip", gzip.compress(BODY)),
        b"/deflate": (b"deflate", zlib.compress(BODY)),
        b"/raw-deflate": (b"deflate", raw_deflate.compress(BODY) + raw_deflate.flush()),
        b"/empty": (b"gzip", b""),
    }

    async def answer(request, writer):
        coding, body = coded[request.split(b" ")[1]]
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: %s\r\nContent-Length: %d\r\n\r\n%s"
            % (coding, len(body), body)
        )

    async def client(server):
        decoded = [await _get(server.url, path.decode(), decode=True) for path in coded]
        as_came = await _get(server.url, "/gzip")
        return decoded, as_came

    decoded, as_came = _run(answer, client)[1]
    assert decoded == [(200, BODY)] * 3 + [(200, b"")]
    # A decoded body says the length it came in: what a store lists an object kept coded at.
    assert [body.coded_size for _, body in decoded[:3]] == [len(coded[p][1]) for p in coded][:3]
    assert as_came == (200, coded[b"/gzip"][1])
    assert type(as_came[1]) is bytes


def test_a_request_given_no_timeout_has_no_limit_in_aiohttp_either():
    """`session.get(..., timeout=None)` (gcsfs's with `requests_timeout=None`) is sent with no
    limit at all, not the session's default of 5 minutes: a read so sent is not cut at 300 s."""
    aiohttp = pytest.importorskip("aiohttp")

    async def slow(request, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.5)
        writer.write(b"ok")

    async def client(server):
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.2))
        async with session, session.get(server.url + "/o", timeout=None) as response:
            by_aiohttp = await response.read()
        limits = http_get.Timeouts.as_aiohttp(None)
        return by_aiohttp, await _get(server.url, timeouts=limits)

    assert _run(slow, client)[1] == (b"ok", (200, b"ok"))
