-- The prompts' index merges its segments in small steps that the indexer takes between other
-- writes, not in whichever batch happens to fill a level (issue 51). With FTS5's automatic
-- merging, one batch in about nine held the writer 9 to 37 ms while it merged, and the submits
-- queued behind it waited as long (docs/benchmarks.md, "The prompts' index: merges in steps").
-- The setting is kept in the index's own configuration table, so it holds from here on.
INSERT INTO tasks_search (tasks_search, rank) VALUES ('automerge', 0);
