-- jit_off: turn JIT compilation off until jit_restore (sent with it in one pipeline, one
-- transaction), keeping the value it replaces in jobchain.jit. For a statement that reads many
-- index entries per type (queue_stats): its cost estimate grows with the table, and past
-- jit_inline_above_cost compiling it takes longer than running it (700 ms measured against 190 ms
-- on a million jobs).
SELECT set_config('jobchain.jit', current_setting('jit'), true), set_config('jit', 'off', true)
