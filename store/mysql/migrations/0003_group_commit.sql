-- Group commit (issue 31): procedures.sql gains the batch procedure
-- "<table>_batch", which Migrate creates with this, the last migration.
-- The table itself does not change: DO 0 is the migration's one
-- statement.
DO 0
