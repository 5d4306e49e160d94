-- What a caller asked for beyond the operation (settings, prompt parameters, metadata), as one
-- JSON value; NULL when nothing was asked beyond the operation.
ALTER TABLE tasks ADD COLUMN extras TEXT;
