-- jit_restore: give jit back the value jit_off kept, for what the transaction runs next.
SELECT set_config('jit', current_setting('jobchain.jit'), true)
