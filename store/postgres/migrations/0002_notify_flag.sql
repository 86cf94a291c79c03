-- notify is set by Subscribe on a processing record that someone waits for.
-- Complete, Release and Delete call pg_notify only for such records: a
-- transaction that sends NOTIFY holds a database-wide lock through its
-- commit (WAL flush included), which would serialise every completion.
ALTER TABLE {{records}} ADD COLUMN notify boolean NOT NULL DEFAULT false;
