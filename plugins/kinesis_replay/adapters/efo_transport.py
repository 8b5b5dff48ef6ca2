"""SubscribeToShard over HTTP/2: botocore builds, signs and parses the call; httpx with h2 carries it.

Kinesis serves enhanced fan-out's SubscribeToShard over HTTP/2 only; botocore's own transport (urllib3) speaks
HTTP/1.1, which AWS documents as unsupported for it (boto/boto3#1690). So a client made here keeps everything of
botocore's (the serializer, SigV4 signing, the retry handler, the parser and its ``botocore.eventstream`` decoder of
the response's AWS event stream) and swaps only the wire for that one operation: botocore emits
``before-send.kinesis.SubscribeToShard`` with the signed request, and a handler that returns a response short-cuts
botocore's own send (``botocore.endpoint.Endpoint._do_get_response``). The handler sends the request with httpx over
HTTP/2 (prior knowledge on a plain ``http://`` endpoint, ALPN on ``https://``), and hands botocore the response body
as a stream, which botocore's EventStream decodes event by event as it is read.

Each subscription gets an HTTP/2 connection of its own, closed with it: a subscription whose reader stops reading
(its queue of events is full) then stops its connection's reads too, and flow control holds Kinesis back, rather than
a shared connection buffering its events for it (httpcore reads every stream of a connection for whichever stream's
reader asks).
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
from botocore.awsrequest import AWSPreparedRequest, AWSResponse, HTTPHeaders
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

from kinesis_replay.core.errors import SubscriptionCutError

OPERATION_EVENT = "before-send.kinesis.SubscribeToShard"
# Kinesis sends a subscription an event at least every few seconds, records or none: a minute without one is a dead
# connection. Connecting and sending the call are quick or broken.
TIMEOUT = httpx.Timeout(connect=10.0, read=60.0, write=10.0, pool=10.0)
# What an HTTP/2 request may not carry (RFC 9113, 8.2.2); httpx sets Content-Length from the body itself.
_DROPPED_HEADERS = frozenset({"connection", "transfer-encoding", "keep-alive", "upgrade", "proxy-connection", "content-length", "expect"})


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every subscription's connection: httpx would build one per client, 56 ms of CPU each here
    (loading the CA bundle). The CA bundle is botocore's: AWS_CA_BUNDLE when set, else certifi's, as httpx's default."""
    import certifi

    return ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE") or certifi.where())


class _Body:
    """The response body as botocore reads an event stream's: ``stream()`` yields its bytes as they come; ``close()``."""

    def __init__(self, http: httpx.Client, response: httpx.Response) -> None:
        self.http, self.response = http, response

    def stream(self, *_: Any, **__: Any) -> Iterator[bytes]:
        try:
            yield from self.response.iter_raw()
        except httpx.HTTPError as exc:
            raise SubscriptionCutError(f"the subscription's HTTP/2 stream ended early: {exc!r}") from exc

    def close(self) -> None:
        try:
            self.response.close()
        finally:
            self.http.close()


class _Read:
    """A body read already."""

    def __init__(self, content: bytes) -> None:
        self.content = content

    def stream(self, *_: Any, **__: Any) -> Iterator[bytes]:
        yield self.content

    def close(self) -> None:
        pass


def _headers(response: httpx.Response) -> HTTPHeaders:
    headers = HTTPHeaders()
    for name, value in response.headers.items():
        headers[name] = value
    return headers


def send_over_http2(request: AWSPreparedRequest, verify: bool = True, **_: Any) -> AWSResponse:
    """The ``before-send`` handler: ``request`` (built and signed by botocore) over HTTP/2, its body left unread.
    ``verify``: check the endpoint's TLS certificate (only a test's self-signed endpoint goes without)."""
    http = httpx.Client(http1=False, http2=True, timeout=TIMEOUT, verify=_tls() if verify else False)
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED_HEADERS}
    body = request.body if isinstance(request.body, bytes) else str(request.body or "").encode()  # botocore's JSON: bytes
    try:
        sent = http.build_request(request.method, request.url, headers=headers, content=body)
        response = http.send(sent, stream=True)
    except httpx.TimeoutException as exc:
        http.close()
        raise ReadTimeoutError(endpoint_url=request.url, error=exc) from exc
    except httpx.HTTPError as exc:  # refused, reset, a server that speaks no HTTP/2
        http.close()
        raise EndpointConnectionError(endpoint_url=request.url, error=exc) from exc
    if response.http_version != "HTTP/2":  # httpx negotiated another protocol: Kinesis would refuse it
        response.close()
        http.close()
        raise EndpointConnectionError(endpoint_url=request.url, error=f"answered over {response.http_version}, not HTTP/2")
    if response.status_code >= 300:  # an error, whose body botocore reads whole: read and let go of the connection now
        try:
            content = response.read()
        finally:
            response.close()
            http.close()
        return AWSResponse(request.url, response.status_code, _headers(response), _Read(content))
    return AWSResponse(request.url, response.status_code, _headers(response), _Body(http, response))


def subscribe_over_http2(client: Any, verify: bool = True) -> Any:
    """Make ``client`` (a botocore Kinesis client) send SubscribeToShard over HTTP/2; returns it. Its other calls are
    unchanged. Idempotent: the handler is registered once, by its unique id. ``verify=False``: for a test endpoint
    whose certificate is self-signed."""
    handler = send_over_http2 if verify else functools.partial(send_over_http2, verify=False)
    client.meta.events.register(OPERATION_EVENT, handler, unique_id="kinesis-replay-http2-subscribe")
    return client
