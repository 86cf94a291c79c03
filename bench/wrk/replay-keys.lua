-- wrk script: POST /payments cycling through 256 Idempotency-Keys, which
-- are replays once each has been used (warm up with one short run first).
-- wrk -t2 -c32 -d10s -s bench/wrk/replay-keys.lua http://127.0.0.1:PORT/payments
local n = 0
wrk.method = "POST"
wrk.body = '{"orderId":"order-123","amount":49900,"currency":"UAH","meta":{"channel":"web"}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer bench-client"
function request()
  n = n + 1
  wrk.headers["Idempotency-Key"] = "wrk-replay-" .. (n % 256)
  return wrk.format()
end
