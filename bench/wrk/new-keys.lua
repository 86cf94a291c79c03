-- wrk script: POST /payments with a new Idempotency-Key on every request.
-- wrk -t2 -c32 -d10s -s bench/wrk/new-keys.lua http://127.0.0.1:PORT/payments
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local n = 0
local run = tostring(os.time())
wrk.method = "POST"
wrk.body = '{"orderId":"order-123","amount":49900,"currency":"UAH","meta":{"channel":"web"}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer bench-client"
function request()
  n = n + 1
  wrk.headers["Idempotency-Key"] = "wrk-" .. run .. "-" .. tostring(tid) .. "-" .. n
  return wrk.format()
end
