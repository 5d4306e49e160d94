-- Shared by the wrk scripts of bench/run: print wrk's own figures as one JSON line, which the
-- driver (examples/easel_bench) parses. Latencies are in microseconds.
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors_connect":%d,"errors_read":%d,"errors_write":%d,' ..
    '"errors_status":%d,"errors_timeout":%d,' ..
    '"latency_mean_us":%.1f,"latency_p50_us":%d,"latency_p90_us":%d,"latency_p99_us":%d,' ..
    '"latency_p999_us":%d,"latency_max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max))
end
