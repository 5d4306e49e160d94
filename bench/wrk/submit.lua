-- POST /api/v1/imagine with a fixed, typical body. The key comes from EASEL_BENCH_KEY (empty for
-- the bare baseline, which does not check it).
dofile("report.lua")

wrk.method = "POST"
wrk.body = '{"prompt": "a red sunset over the ocean, in soft watercolour", "aspect_ratio": "16:9"}'
wrk.headers["Content-Type"] = "application/json"
local key = os.getenv("EASEL_BENCH_KEY") or ""
if key ~= "" then
  wrk.headers["Authorization"] = key
end
