-- POST /api/v1/imagine with submit.lua's body, each request with an Idempotency-Key of its own:
-- the run's prefix (EASEL_BENCH_IDEMPOTENCY_PREFIX, fresh per run, so that no run replays
-- another's keys), wrk's thread number and a counter. With the prefix empty, the same requests
-- without the header, made the same way (a Lua function per request costs wrk time that a
-- fixed request does not), for the baseline.
dofile("report.lua")

local body = '{"prompt": "a red sunset over the ocean, in soft watercolour", "aspect_ratio": "16:9"}'
local prefix = os.getenv("EASEL_BENCH_IDEMPOTENCY_PREFIX") or ""
local key = os.getenv("EASEL_BENCH_KEY") or ""

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("thread_number", threads)
end

local counter = 0
local headers = { ["Content-Type"] = "application/json" }
if key ~= "" then
  headers["Authorization"] = key
end

function request()
  counter = counter + 1
  if prefix ~= "" then
    headers["Idempotency-Key"] = prefix .. "-" .. tostring(thread_number or 0) .. "-" .. counter
  end
  return wrk.format("POST", nil, headers, body)
end
