-- wrk script for bench/gateway_wrk.sh: POSTs $ATRIUM_BENCH_BODY as JSON, with
-- "Authorization: Bearer $ATRIUM_BENCH_TOKEN" when that is set, and prints one
-- machine-readable RESULT line (requests/s, p50 and p99 in microseconds,
-- errors = socket errors plus non-2xx/3xx answers). With $ATRIUM_BENCH_DELAY_MS
-- set, each connection waits that long before each request (wrk counts whole
-- milliseconds, so a fractional wait is rounded up or down at random, to
-- the right average); latencies are measured from the send as always.
wrk.method = "POST"
wrk.body = os.getenv("ATRIUM_BENCH_BODY")
wrk.headers["Content-Type"] = "application/json"
local token = os.getenv("ATRIUM_BENCH_TOKEN")
if token ~= nil and token ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. token
end

local delay_ms = tonumber(os.getenv("ATRIUM_BENCH_DELAY_MS") or "")
if delay_ms ~= nil and delay_ms > 0 then
  local whole = math.floor(delay_ms)
  local fraction = delay_ms - whole
  delay = function()
    if math.random() < fraction then return whole + 1 end
    return whole
  end
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT rps=%.1f p50_us=%d p99_us=%d requests=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50),
    latency:percentile(99), summary.requests,
    e.connect + e.read + e.write + e.timeout + e.status))
end
