-- Placeholder: the number another branch of this session's merge takes (the
-- lead drops this file when that branch's migration lands). Changes nothing.
SELECT 1;
