-- wrk script for bench/api_wrk.sh: sends "Authorization: Bearer $ATRIUM_BENCH_TOKEN"
-- when that variable is set, and prints one machine-readable RESULT line at the end
-- (requests/s over the whole run, p50 and p99 latency in microseconds, errors =
-- socket errors plus non-2xx/3xx answers).
local token = os.getenv("ATRIUM_BENCH_TOKEN")
if token ~= nil and token ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. token
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT rps=%.1f p50_us=%d p99_us=%d requests=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50),
    latency:percentile(99), summary.requests,
    e.connect + e.read + e.write + e.timeout + e.status))
end
