-- Tasks keep their images' blob keys instead of absolute URLs, so that `public_url` (or the blob
-- store's public base URL) can change and any node can build the addresses. The keys are what
-- follows `/files/` in the URLs stored so far.
ALTER TABLE tasks RENAME COLUMN original_image_url TO grid_key;
ALTER TABLE tasks RENAME COLUMN image_urls TO image_keys;

UPDATE tasks SET grid_key = substr(grid_key, instr(grid_key, '/files/') + 7)
WHERE grid_key IS NOT NULL AND instr(grid_key, '/files/') > 0;

UPDATE tasks SET image_keys = (
    SELECT json_group_array(
        CASE WHEN instr(value, '/files/') > 0 THEN substr(value, instr(value, '/files/') + 7)
             ELSE value END)
    FROM (SELECT value FROM json_each(tasks.image_keys) ORDER BY key)
)
WHERE image_keys IS NOT NULL;
