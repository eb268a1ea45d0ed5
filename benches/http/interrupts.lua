-- wrk script: POST /v1/interrupts with a unique request id per request, so every request is a
-- real append (an identical body would be an idempotent duplicate that writes nothing).
-- Usage: TOKEN=... wrk -t4 -c64 -d20s -s benches/http/interrupts.lua http://127.0.0.1:8080
local counter = 0
local thread_id = 0
local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
  thread_id = tid
end

function request()
  counter = counter + 1
  local rid = string.format("load-%d-%d-%d", os.time(), thread_id, counter)
  local body = string.format(
    '{"request_id":"%s","thread_id":"load-%d","interrupt_id":"i-%d","action":{"tool":"refund","args":{"order_id":"O-%d","amount_cents":%d}}}',
    rid, counter % 1000, counter, counter, counter)
  return wrk.format(nil, "/v1/interrupts", nil, body)
end

function response(status, headers, body)
  if status ~= 201 then
    io.stderr:write("unexpected status " .. status .. "\n")
  end
end
