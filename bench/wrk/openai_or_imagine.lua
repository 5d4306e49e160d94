-- One image generation, waited for, in either dialect (EASEL_BENCH_DIALECT): `openai` posts
-- OpenAI's POST /v1/images/generations (one image, its URL in the answer); `apiframe` posts
-- POST /api/v1/imagine with `Prefer: wait=60`, answered with the finished task's record. Both
-- are fixed requests, so that wrk spends the same on each; the URL given to wrk picks the route.
dofile("report.lua")

local prompt = "a red sunset over the ocean, in soft watercolour"
local key = os.getenv("EASEL_BENCH_KEY") or ""
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
if os.getenv("EASEL_BENCH_DIALECT") == "openai" then
  wrk.body = '{"prompt": "' .. prompt .. '", "n": 1, "size": "1024x1024", "response_format": "url"}'
  wrk.headers["Authorization"] = "Bearer " .. key
else
  wrk.body = '{"prompt": "' .. prompt .. '", "aspect_ratio": "1:1"}'
  wrk.headers["Authorization"] = key
  wrk.headers["Prefer"] = "wait=60"
end
