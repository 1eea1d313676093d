-- Scalar macros the models call, defined on the build connection before any model runs (models.set_parameters).
-- Each macro follows the ones it calls.

-- One comparison of a Mann–Whitney count: 1 when b is higher than a, ½ for a tie, 0 otherwise.
create or replace temp macro mann_whitney_score(b, a) as case when b > a then 1.0 when b = a then 0.5 else 0.0 end;

-- The two rational approximations below continue a polynomial's Horner form on the next line, one step further in,
-- which sqlfluff's layout rule cannot express.
-- noqa: disable=LT02

-- The lower tail of normal_quantile, in q = sqrt(−2 ln p).
create or replace temp macro _normal_tail_quantile(q) as (
    (((((-7.784894002430293e-03 * q - 3.223964580411365e-01) * q - 2.400758277161838e+00) * q
        - 2.549732539343734e+00) * q + 4.374664141464968e+00) * q + 2.938163982698783e+00)
    / ((((7.784695709601795e-03 * q + 3.224671290700398e-01) * q + 2.445134137142996e+00) * q
        + 3.754408661907416e+00) * q + 1)
);

-- The standard normal quantile: Acklam's rational approximation (relative error below 1.2e-9).
create or replace temp macro normal_quantile(p) as (
    case
        when p < 0.02425 then _normal_tail_quantile(sqrt(-2 * ln(p)))
        when p > 1 - 0.02425 then -_normal_tail_quantile(sqrt(-2 * ln(1 - p)))
        else
            (((((-3.969683028665376e+01 * (p - 0.5) ^ 2 + 2.209460984245205e+02) * (p - 0.5) ^ 2
                - 2.759285104469687e+02) * (p - 0.5) ^ 2 + 1.383577518672690e+02) * (p - 0.5) ^ 2
                - 3.066479806614716e+01) * (p - 0.5) ^ 2 + 2.506628277459239e+00) * (p - 0.5)
            / (((((-5.447609879822406e+01 * (p - 0.5) ^ 2 + 1.615858368580409e+02) * (p - 0.5) ^ 2
                - 1.556989798598866e+02) * (p - 0.5) ^ 2 + 6.680131188771972e+01) * (p - 0.5) ^ 2
                - 1.328068155288572e+01) * (p - 0.5) ^ 2 + 1)
    end
);

-- noqa: enable=LT02

-- Student's t quantile with upper tail probability p (< 0.5) on any real df > 0.5: Hill's closed form (ACM
-- Algorithm 396, the one R's qt uses for fractional df), as pipelines/stats/intervals.t_quantile. Within 0.05%
-- of the exact quantile at 2 degrees of freedom, 1e-6 from 4 up, and larger (conservative) below 2. Written as
-- nested selects, one per intermediate value, so that no expression is substituted into itself.
create or replace temp macro t_quantile(p, df) as (
    select sqrt(n * if(y > 0.05 + a, if(large > 0.002, exp(large) - 1, 0.5 * large * large + large), small))
    from (
        select
            *,
            a * ((((((0.4 * x * x + 6.3) * x * x + 36) * x * x + 94.5) / cx - x * x - 3) / b + 1) * x) ^ 2 as large,
            ((1 / (((n + 6) / (n * y) - 0.089 * d - 0.822) * (n + 2) * 3) + 0.5 / (n + 4)) * y - 1)
            * (n + 1) / (n + 2) + 1 / y as small
        from (
            select
                *,
                (d * two_tailed) ^ (2 / n) as y,
                (((0.05 * d * x - 5) * x - 7) * x - 2) * x + b + if(n < 5, c + 0.3 * (n - 4.5) * (x + 0.6), c) as cx
            from (
                select
                    *,
                    ((94.5 / (b + c) - 3) / b + 1) * sqrt(a * pi() / 2) * n as d
                from (
                    select
                        *,
                        ((20700 * a / b - 98) * a - 16) * a + 96.36 as c
                    from (
                        select
                            2 * p as two_tailed,
                            df::double as n,
                            1 / (df - 0.5) as a,
                            48 * (df - 0.5) ^ 2 as b,
                            normal_quantile(p) as x
                    ) as inputs
                ) as with_c
            ) as with_d
        ) as with_y_cx
    ) as with_large_small
);

-- Variance of the mean of n consecutive values of an AR(1) of variance `drift` and coefficient phi (< 1) plus white
-- noise of variance `noise`, as pipelines/stats/intervals.window_variance.
create or replace temp macro ar1_mean_variance(drift, phi, noise, n) as (
    drift / n * ((1 + phi) / (1 - phi) - 2 * phi * (1 - phi ^ n) / (n * (1 - phi) ^ 2)) + noise / n
);

-- The quantile of an interval's half-width: Student's t on df degrees of freedom, or the normal's when df is null (a
-- variance taken as known, as `reml` takes it).
create or replace temp macro interval_quantile(p, df) as coalesce(t_quantile(p, df), normal_quantile(1 - p));
