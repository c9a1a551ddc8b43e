-- jit_off: turn JIT compilation off until jit_restore (sent with it in one pipeline, one
-- transaction), keeping the value it replaces in jobchain.jit. For a statement whose cost estimate
-- grows with the table until compiling it takes longer than running it: queue_stats (700 ms of
-- compiling against 190 ms of run on a million jobs), chains_prune (1.9 s against 0.4 s).
SELECT set_config('jobchain.jit', current_setting('jit'), true), set_config('jit', 'off', true)
