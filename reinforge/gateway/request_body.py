"""A request body read with a size bound: an over-size body is refused with a 413 before it is parsed.

A 50 MB body used to be read, parsed and tokenized whole (3 minutes at ~2.5 GB); now a body over
`max_body_bytes` is refused as soon as its declared length (Content-Length) or the bytes received
say so, without keeping it. The rest of the body is read and dropped (up to DRAIN_LIMIT_BYTES) so
that the client, still sending, receives the 413 instead of a reset connection.
"""

from __future__ import annotations

from fastapi import Request

from reinforge.gateway.wire import GatewayError

DEFAULT_MAX_BODY_BYTES = 8 * 2**20  # far above any conversation that fits a context of 100k tokens
DRAIN_LIMIT_BYTES = 256 * 2**20  # past this an over-size body is not read on: the connection closes


def body_too_large(max_bytes: int, size: str) -> GatewayError:
    return GatewayError(
        413, f"the request body is {size}, over this gateway's limit of {max_bytes} bytes (max_body_bytes): send a "
             "shorter conversation, or raise the limit (reinforge serve --max-body-mb)",
        type="invalid_request_error", code="request_too_large")


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The body, or a 413 GatewayError when it is over `max_bytes`."""
    declared = request.headers.get("content-length", "")
    too_large = None
    if declared.isdigit() and int(declared) > max_bytes:
        too_large = body_too_large(max_bytes, f"{int(declared)} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if too_large is None and size > max_bytes:
            too_large = body_too_large(max_bytes, f"more than {max_bytes} bytes")
        if too_large is not None:
            chunks = []  # dropped as it comes: an over-size body is never held
            if size > DRAIN_LIMIT_BYTES:
                break
        else:
            chunks.append(chunk)
    if too_large is not None:
        raise too_large
    return b"".join(chunks)
