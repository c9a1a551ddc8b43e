-- wake_hint_consume: claim one wake slot of the budget at KEYS[1].
-- Returns 1 (wake) when a slot was claimed or when no budget is tracked (missing or expired
-- key, or a value that is not a number): never miss a wake-up. Returns 0 when exhausted.
-- DECR keeps the TTL set by wake_hint_provide.
local current = redis.call('GET', KEYS[1])
if not current then
  return 1
end
local n = tonumber(current)
if n == nil then
  return 1
end
if n > 0 then
  redis.call('DECR', KEYS[1])
  return 1
end
return 0
