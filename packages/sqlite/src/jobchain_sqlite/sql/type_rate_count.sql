-- type_rate_count: add a claim's claims to each rate-limited type's window counter, starting
-- it again when the window moved. :counts is a JSON array of [type_name, window start, count].
INSERT INTO {p}type_control (type_name, rate_window_start, rate_window_count)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]')
FROM json_each(:counts)
WHERE true
ON CONFLICT (type_name) DO UPDATE SET
    rate_window_count = CASE WHEN {p}type_control.rate_window_start = excluded.rate_window_start
                             THEN {p}type_control.rate_window_count + excluded.rate_window_count
                             ELSE excluded.rate_window_count END,
    rate_window_start = excluded.rate_window_start
