-- types_pause: pause the types of :type_names (a JSON array); one already paused keeps its
-- paused_at. Returns every one of them (all paused now).
INSERT INTO {p}type_control (type_name, paused_at)
SELECT DISTINCT value, :now FROM json_each(:type_names)
WHERE true
ON CONFLICT (type_name) DO UPDATE SET paused_at = COALESCE({p}type_control.paused_at, excluded.paused_at)
RETURNING type_name, paused_at
