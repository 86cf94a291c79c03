-- 0003: the route that handled each record's request (ClaimParams.Route),
-- for operators. Rows written before it have the empty route.
ALTER TABLE {{table}} ADD COLUMN route TEXT NOT NULL DEFAULT '';
