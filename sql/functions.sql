-- Scalar macros the models call, defined on the build connection before any model runs (models.set_parameters),
-- beside the Python functions of pipelines/stats/sql_functions.py (the interval statistics).

-- One comparison of a Mann–Whitney count: 1 when b is higher than a, ½ for a tie, 0 otherwise.
create or replace temp macro mann_whitney_score(b, a) as case when b > a then 1.0 when b = a then 0.5 else 0.0 end;
