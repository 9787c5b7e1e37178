-- sloth queue on PostgreSQL: each machine publishes its resources (issue 28, item 1).
--
-- * hosts.resources: how many tokens of each named resource the daemon of
--   that host gives out (its [resources], or the GPUs nvidia-smi lists), as
--   JSON ({"gpu": 1}); written with every refresh of its row. Another
--   machine refuses `sloth add --on HOST --needs ...` that HOST can never
--   meet; NULL (a daemon that does not publish) is not judged.

ALTER TABLE sloth.hosts ADD COLUMN resources text;
