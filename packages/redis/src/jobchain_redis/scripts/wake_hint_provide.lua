-- wake_hint_provide: add ARGV[1] wake slots to the budget at KEYS[1] and refresh its TTL.
-- KEYS[1] hint key ({prefix}:hint:{<type name>}); ARGV[1] count to add; ARGV[2] TTL in seconds.
-- GET then SET inside one script is atomic, so concurrent publishers add up (3 + 3 = 6).
-- A value that is not a number (written by something else) counts as an empty budget.
local current = tonumber(redis.call('GET', KEYS[1])) or 0
redis.call('SET', KEYS[1], current + tonumber(ARGV[1]), 'EX', tonumber(ARGV[2]))
return current + tonumber(ARGV[1])
