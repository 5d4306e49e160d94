-- POST /api/v1/fetch for task ids picked at random from the file EASEL_BENCH_IDS (one per line),
-- with the key in EASEL_BENCH_KEY.
dofile("report.lua")

local ids = {}
local headers = {
  ["Content-Type"] = "application/json",
  ["Authorization"] = os.getenv("EASEL_BENCH_KEY") or "",
}

function init(args)
  for line in io.lines(os.getenv("EASEL_BENCH_IDS")) do
    if #line > 0 then
      ids[#ids + 1] = line
    end
  end
  if #ids == 0 then
    error("no task ids in " .. os.getenv("EASEL_BENCH_IDS"))
  end
  -- Each wrk thread has its own Lua state; seed each one differently.
  math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)") or "0", 16) % 100000)
end

function request()
  local id = ids[math.random(#ids)]
  return wrk.format("POST", "/api/v1/fetch", headers, '{"task_id": "' .. id .. '"}')
end
