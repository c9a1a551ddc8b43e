INSERT INTO one_insert (payload) VALUES ('null'::jsonb);
