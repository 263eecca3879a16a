"""Open-loop load for the gateway benchmarks (bench/gateway_fairness.sh,
bench/gateway_idle_streams.sh): asyncio over raw HTTP/1.1 sockets, no
third-party packages.

  stream_request()  one streamed chat completion: time to first content
                    token, output tokens, status
  open_loop()       Poisson arrivals at a rate for a duration, one task each
"""
import asyncio
import json
import random
import time


async def stream_request(host, port, key, model, max_tokens, prompt, deadline_ms=None,
                         hold_open=False):
    """Returns dict(status, ttft, total, tokens). ttft/total in seconds."""
    start = time.perf_counter()
    body = json.dumps({"model": model, "stream": True, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": prompt}]}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n")
    if deadline_ms:
        head += f"X-Atrium-Deadline-Ms: {deadline_ms}\r\n"
    result = {"status": 0, "ttft": None, "total": None, "tokens": 0}
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return result
    try:
        writer.write(head.encode() + b"\r\n" + body)
        await writer.drain()
        status_line = await reader.readline()
        if not status_line:
            return result
        result["status"] = int(status_line.split()[1])
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        if result["status"] != 200:
            await reader.read()
            return result
        pending = b""
        while True:
            size_line = await reader.readline()
            if not size_line:
                break
            size = int(size_line.strip() or b"0", 16)
            if size == 0:
                break
            chunk = await reader.readexactly(size + 2)
            pending += chunk[:-2]
            while b"\n\n" in pending:
                event, pending = pending.split(b"\n\n", 1)
                if not event.startswith(b"data: ") or event == b"data: [DONE]":
                    continue
                data = json.loads(event[6:])
                if data.get("choices") and data["choices"][0].get("delta", {}).get("content"):
                    if result["ttft"] is None:
                        result["ttft"] = time.perf_counter() - start
                    result["tokens"] += 1
        result["total"] = time.perf_counter() - start
        return result
    except (OSError, asyncio.IncompleteReadError, ValueError):
        return result
    finally:
        writer.close()


async def open_loop(rate, duration, make_request, seed):
    """Starts make_request() at Poisson arrivals; returns the results, each
    with "due" (its arrival, seconds from the start) and "late" (how much
    later it was actually sent: a client that falls behind catches up in a
    burst, which is not the Poisson stream it was meant to be)."""
    rng = random.Random(seed)
    tasks = []
    t0 = time.perf_counter()
    next_at = 0.0

    async def timed(due):
        late = time.perf_counter() - (t0 + due)
        result = await make_request()
        result["due"] = due
        result["late"] = late
        return result

    while next_at < duration:
        delay = t0 + next_at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(timed(next_at)))
        next_at += rng.expovariate(rate)
    return await asyncio.gather(*tasks)


def sent_per_second(results):
    """The most requests sent within any one second (by when they were sent)."""
    sent = sorted(r["due"] + r["late"] for r in results)
    most, lo = 0, 0
    for hi, t in enumerate(sent):
        while t - sent[lo] >= 1.0:
            lo += 1
        most = max(most, hi - lo + 1)
    return most


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = max(0, min(len(values) - 1, int(round(p / 100.0 * len(values) + 0.5)) - 1))
    return values[k]
