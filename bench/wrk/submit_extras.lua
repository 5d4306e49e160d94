-- POST /api/v1/imagine as submit.lua, with a prompt full of Midjourney parameters and a metadata
-- object just under its 4 KiB limit: what the caller's additions cost a submit.
dofile("report.lua")

local filler = string.rep("x", 4096 - 64)
wrk.method = "POST"
wrk.body = '{"prompt": "a red sunset over the ocean, in soft watercolour --ar 16:9 --no boats, '
  .. 'people --chaos 30 --stylize 250 --seed 42 --tile --q 1", '
  .. '"metadata": {"order_id": "A-1234567", "chat": 99887766, "note": "' .. filler .. '"}}'
wrk.headers["Content-Type"] = "application/json"
local key = os.getenv("EASEL_BENCH_KEY") or ""
if key ~= "" then
  wrk.headers["Authorization"] = key
end
