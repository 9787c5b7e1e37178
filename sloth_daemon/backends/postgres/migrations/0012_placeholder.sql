-- A placeholder for another branch's migration 0012 (round 6): the lead drops this file at merge.
SELECT 1;
