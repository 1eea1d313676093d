-- One row per run: its span of loaded epochs and the gaps in it, the final reward (mean over the last
-- getvariable('final_window') loaded epochs), the area under the curve (mean over all loaded epochs), the peak of
-- the EMA and the first epoch reaching it, and the compute-matched comparison: matched_horizon is the smallest
-- last epoch among the runs of the same ablation, matched_reward the mean over the last final_window loaded
-- epochs at or before it. Windows count loaded epochs, so a gap does not shorten them. Snapshot ids of the
-- final, best (peak EMA) and matched epochs. Mean rewards are the recomputed ones (finite rewards only).
-- The matched reward's own interval at getvariable('ci_level') (matched_ci_low/high), by getvariable('ci_method')
-- (docs/statistics.md): `reml` fits a quadratic trend plus an AR(1) drift plus white noise to the last
-- getvariable('ci_fit_epochs') loaded epochs at or before the horizon by its exact restricted likelihood, and takes
-- the variance of the window mean from that model, with a normal quantile (matched_ci_df null); `ar1` fits the same
-- model to the same epochs by moments, with a t quantile on the fit's effective n − 1 degrees of freedom; `iid`
-- treats the window's epochs as independent (t interval, effective n = the window's epochs). matched_effective_n:
-- the window's epochs worth of independent ones (the variance of one epoch over that of the window mean);
-- matched_iqm: the interquartile mean of the window (the middle half of its values after dropping floor(n/4) at
-- each end, as rliable's IQM); matched_std_error and matched_ci_df are what ablation_contrasts combines for two runs.
-- Incremental on run_id: a run's row reads its own epochs and its ablation's horizon (run_horizons).
with epochs as (
    select
        run_id,
        epoch,
        mean_reward,
        reward_ema
    from epoch_metrics
),

snapshot_ids as (
    select
        run_id,
        epoch,
        snapshot_id
    from fact_epochs
),

matched_horizons as (
    select
        run_id,
        ablation,
        matched_horizon
    from run_horizons
),

-- `order by` in the averages fixes their summation order: a rebuild gives identical numbers at any thread count;
-- they sum values divided by 2^32 (exact), so that a sum past the largest float leaves the mean finite
spans as (
    select
        run_id,
        min(epoch) as first_epoch,
        max(epoch) as last_epoch,
        count(*) as n_epochs,
        avg(mean_reward / 4294967296 order by epoch) * 4294967296 as auc_reward,
        max(reward_ema) filter (where isfinite(reward_ema)) as peak_reward_ema
    from epochs
    group by run_id
),

-- each run's ablation and its compute-matched horizon, computed across the ablation's runs by run_horizons
horizons as (
    select
        spans.*,
        matched_horizons.ablation,
        matched_horizons.matched_horizon
    from spans
    inner join matched_horizons using (run_id)
),

ranked as (
    select
        epochs.*,
        horizons.matched_horizon,
        horizons.peak_reward_ema,
        row_number() over (partition by epochs.run_id order by epochs.epoch desc) as rank_from_last,
        case when epochs.epoch <= horizons.matched_horizon then
                row_number() over (
                    partition by epochs.run_id, epochs.epoch <= horizons.matched_horizon
                    order by epochs.epoch desc
                )
        end as rank_from_horizon
    from epochs
    inner join horizons using (run_id)
),

windows as (
    select
        run_id,
        avg(mean_reward / 4294967296 order by epoch) filter (where rank_from_last <= getvariable('final_window'))
        * 4294967296
            as final_reward,
        avg(mean_reward / 4294967296 order by epoch) filter (where rank_from_horizon <= getvariable('final_window'))
        * 4294967296
            as matched_reward,
        max(epoch) filter (where rank_from_horizon is not null) as matched_epoch,
        -- "reaching" the peak allows for rounding: the debiased EMA of a flat curve wobbles in the last bits
        min(epoch) filter (where reward_ema >= peak_reward_ema - 1e-12 * greatest(1, abs(peak_reward_ema)))
            as peak_epoch
    from ranked
    group by run_id
),

-- (Every window below runs over the run's rows in epoch order, so that sums add in one order at any thread count.)
-- The fit span: the last ci_fit_epochs loaded epochs at or before the horizon with a finite mean; its epochs
-- scaled to [−1, 1] and the first two orthogonal polynomials in them (x2 is x1² without its part along 1 and x1),
-- so that the quadratic trend is the mean plus one simple regression on each
fit_values as (
    select
        *,
        scaled_epoch - avg(scaled_epoch) over run as x1
    from (
        select
            run_id,
            epoch,
            mean_reward,
            rank_from_horizon <= getvariable('final_window') as in_window,
            coalesce((epoch - min(epoch) over run) / nullif(max(epoch) over run - min(epoch) over run, 0) * 2 - 1, 0)
                as scaled_epoch
        from ranked
        where rank_from_horizon <= getvariable('ci_fit_epochs') and isfinite(mean_reward)
        window run as (partition by run_id order by epoch rows between unbounded preceding and unbounded following)
    ) as fit_span
    window run as (partition by run_id order by epoch rows between unbounded preceding and unbounded following)
),

fit_polynomials as (
    select
        *,
        x1 * x1 - avg(x1 * x1) over run - coalesce(regr_slope(x1 * x1, x1) over run, 0) * x1 as x2
    from fit_values
    window run as (partition by run_id order by epoch rows between unbounded preceding and unbounded following)
),

-- residuals around the quadratic trend, and the lag-1 and lag-2 residuals in epoch order
detrended as (
    select
        run_id,
        epoch,
        in_window,
        mean_reward,
        residual,
        lag(residual, 1) over (partition by run_id order by epoch) as residual_lag1,
        lag(residual, 2) over (partition by run_id order by epoch) as residual_lag2
    from (
        select
            *,
            mean_reward - avg(mean_reward) over run
            - coalesce(regr_slope(mean_reward, x1) over run, 0) * x1
            - coalesce(regr_slope(mean_reward, x2) over run, 0) * x2 as residual
        from fit_polynomials
        window run as (partition by run_id order by epoch rows between unbounded preceding and unbounded following)
    ) as fitted
),

-- autocovariances γ0, γ1, γ2 of the residuals (sums over T, around their mean), and the window's size and spread
moments as (
    select
        run_id,
        count(*) as fit_size,
        sum((residual - residual_mean) ^ 2 order by epoch) / count(*) as gamma0,
        sum((residual - residual_mean) * (residual_lag1 - residual_mean) order by epoch) / count(*) as gamma1,
        sum((residual - residual_mean) * (residual_lag2 - residual_mean) order by epoch) / count(*) as gamma2,
        count(*) filter (where in_window) as window_size,
        var_samp(mean_reward order by epoch) filter (where in_window) as window_variance
    from (
        select
            *,
            avg(residual)
                over (partition by run_id order by epoch rows between unbounded preceding and unbounded following)
                as residual_mean
        from detrended
    ) as centred
    group by run_id
),

-- φ = γ2/γ1 (white noise leaves γ1 and γ2 alone), corrected three times for the downward bias of an AR fit on
-- fit_size detrended values, φ ← φ̂ + (3 + 5φ)/T; the drift's variance γ1/φ̂ and the noise's γ0 − that. No drift
-- (φ = 0) unless γ1 and γ2 are both positive.
ar_fits as (
    select
        *,
        if(
            raw_phi > 0,
            least(
                raw_phi + (3 + 5 * least(
                    raw_phi + (3 + 5 * least(raw_phi + (3 + 5 * raw_phi) / fit_size, 0.995)) / fit_size, 0.995
                )) / fit_size,
                0.995
            ),
            0.0
        ) as phi,
        least(gamma1 / raw_phi, gamma0) as drift_variance
    from (
        select
            *,
            if(gamma1 > 0 and gamma2 > 0, least(gamma2 / gamma1, 0.995), 0.0) as raw_phi
        from moments
    ) as raw_fits
),

-- `reml` (docs/statistics.md): the exact restricted likelihood of the same model (quadratic trend + AR(1) drift +
-- white noise), maximised over a grid of φ and noise-to-drift ratios, as pipelines/stats/intervals.reml_fit. For
-- each run and grid point a Kalman filter runs over the fit's epochs in order, on the rewards and on each trend term
-- at once; the filter's innovations give the generalised least-squares inner products of those series, from which
-- the trend's removal (Gram–Schmidt on 1, x1, x2) leaves the residual sum of squares and log|X'Σ⁻¹X|. The drift's
-- variance is scaled to 1 in the filter (σ² is profiled out). No rows at all unless ci_method is `reml`.
reml_phis as (
    select
        unnest([
            0.0, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.84, 0.87, 0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 0.995
        ])::double as phi
),

reml_noise_ratios as (
    select unnest([0.0, 0.03, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.5, 4.0, 8.0, 20.0])::double as noise_ratio
),

reml_grid as (
    select
        reml_phis.phi,
        reml_noise_ratios.noise_ratio
    from reml_phis
    cross join reml_noise_ratios
    -- white noise alone: the ratio is not identified
    where getvariable('ci_method') = 'reml' and (reml_phis.phi > 0 or reml_noise_ratios.noise_ratio = 0)
),

reml_series as (
    select
        run_id,
        count(*) as fit_size,
        list({ 'y': mean_reward, 'x1': x1, 'x2': x2 } order by epoch) as fit_epochs
    from fit_polynomials
    where getvariable('ci_method') = 'reml'
    group by run_id
),

-- the filter's state after each epoch: the filtered drift of each series (rewards y, 1, x1, x2), the next epoch's
-- predicted drift variance and innovation variance f (p' = φ²·p·λ/f + 1 − φ², f' = p' + λ; gain p/f), the inner
-- products Σ v_a·v_b / f of the innovations v = value − φ·state, and Σ ln f
reml_filters as (
    select
        reml_series.run_id,
        reml_series.fit_size,
        reml_grid.phi,
        reml_grid.noise_ratio,
        list_reduce(  -- noqa: PRS, RF02
            reml_series.fit_epochs,
            lambda s, e: {
                'y': phi * s.y + s.p / s.f * (e.y - phi * s.y),
                'one': phi * s.one + s.p / s.f * (1 - phi * s.one),
                'x1': phi * s.x1 + s.p / s.f * (e.x1 - phi * s.x1),
                'x2': phi * s.x2 + s.p / s.f * (e.x2 - phi * s.x2),
                'p': phi * phi * s.p * noise_ratio / s.f + 1 - phi * phi,
                'f': phi * phi * s.p * noise_ratio / s.f + 1 - phi * phi + noise_ratio,
                'yy': s.yy + (e.y - phi * s.y) ^ 2 / s.f,
                'y1': s.y1 + (e.y - phi * s.y) * (1 - phi * s.one) / s.f,
                'yx1': s.yx1 + (e.y - phi * s.y) * (e.x1 - phi * s.x1) / s.f,
                'yx2': s.yx2 + (e.y - phi * s.y) * (e.x2 - phi * s.x2) / s.f,
                'c11': s.c11 + (1 - phi * s.one) ^ 2 / s.f,
                'c1x1': s.c1x1 + (1 - phi * s.one) * (e.x1 - phi * s.x1) / s.f,
                'c1x2': s.c1x2 + (1 - phi * s.one) * (e.x2 - phi * s.x2) / s.f,
                'x1x1': s.x1x1 + (e.x1 - phi * s.x1) ^ 2 / s.f,
                'x1x2': s.x1x2 + (e.x1 - phi * s.x1) * (e.x2 - phi * s.x2) / s.f,
                'x2x2': s.x2x2 + (e.x2 - phi * s.x2) ^ 2 / s.f,
                'log_f': s.log_f + ln(s.f)
            },
            {
                'y': 0.0, 'one': 0.0, 'x1': 0.0, 'x2': 0.0, 'p': 1.0, 'f': 1.0 + noise_ratio, 'yy': 0.0, 'y1': 0.0,
                'yx1': 0.0, 'yx2': 0.0, 'c11': 0.0, 'c1x1': 0.0, 'c1x2': 0.0, 'x1x1': 0.0, 'x1x2': 0.0,
                'x2x2': 0.0, 'log_f': 0.0
            }
        ) as filtered
    from reml_series
    -- φ up to the drift whose correlation time (1 + φ)/(1 − φ) is half the fit: a slower one cannot be told from the
    -- trend, and letting the fit reach it piles estimates up at the grid's edge, several times too wide
    inner join reml_grid on reml_grid.phi <= (reml_series.fit_size - 2) / (reml_series.fit_size + 2)
    where reml_series.fit_size >= 5
),

reml_sums as (
    select
        run_id,
        fit_size,
        phi,
        noise_ratio,
        struct_extract(filtered, 'yy') as yy,
        struct_extract(filtered, 'y1') as y1,
        struct_extract(filtered, 'yx1') as yx1,
        struct_extract(filtered, 'yx2') as yx2,
        struct_extract(filtered, 'c11') as c11,
        struct_extract(filtered, 'c1x1') as c1x1,
        struct_extract(filtered, 'c1x2') as c1x2,
        struct_extract(filtered, 'x1x1') as x1x1,
        struct_extract(filtered, 'x1x2') as x1x2,
        struct_extract(filtered, 'x2x2') as x2x2,
        struct_extract(filtered, 'log_f') as log_f
    from reml_filters
),

-- the trend removed by Gram–Schmidt in that inner product: x1 less its part along 1 (x1'), x2 less its parts along
-- 1 and x1' (x2''); the restricted log-likelihood −½[(T − 3) ln(q/(T − 3)) + Σ ln f + ln|X'Σ⁻¹X|]
reml_likelihoods as (
    select
        run_id,
        phi,
        noise_ratio,
        q / (fit_size - 3) as scale,
        -0.5 * ((fit_size - 3) * ln(q / (fit_size - 3)) + log_f + ln(c11) + ln(x1x1_1) + ln(x2x2_2)) as log_likelihood
    from (
        select
            *,
            yy - y1 * y1 / c11 - yx1_1 * yx1_1 / x1x1_1 - yx2_2 * yx2_2 / x2x2_2 as q
        from (
            select
                *,
                x2x2 - c1x2 * c1x2 / c11 - x1x2_1 * x1x2_1 / x1x1_1 as x2x2_2,
                yx2 - y1 * c1x2 / c11 - x1x2_1 * yx1_1 / x1x1_1 as yx2_2
            from (
                select
                    *,
                    x1x1 - c1x1 * c1x1 / c11 as x1x1_1,
                    x1x2 - c1x1 * c1x2 / c11 as x1x2_1,
                    yx1 - c1x1 * y1 / c11 as yx1_1
                from reml_sums
            ) as along_1
        ) as along_x1
    ) as residuals
    where q > 0 and x1x1_1 > 0 and x2x2_2 > 0
),

reml_fits as (
    select
        run_id,
        arg_max({ 'phi': phi, 'noise_ratio': noise_ratio, 'scale': scale }, log_likelihood) as reml_best
    from reml_likelihoods
    group by run_id
),

fits as (
    select
        ar_fits.*,
        reml_fits.reml_best.phi as reml_phi,
        reml_fits.reml_best.noise_ratio as reml_noise_ratio,
        reml_fits.reml_best.scale as reml_scale
    from ar_fits
    left join reml_fits on ar_fits.run_id = reml_fits.run_id
),

-- the variance of the mean of the window's n values under that model: s²/n · [(1+φ)/(1−φ) − 2φ(1−φⁿ)/(n(1−φ)²)]
-- + r/n (γ0/n without drift, 0 for a constant curve); under `iid`, the window's sample variance over n. The same
-- for all the fit's values gives the fit's effective n: the variance is estimated from those values, so its degrees
-- of freedom are the fit's effective n − 1
window_variances as (
    select
        run_id,
        window_size,
        case getvariable('ci_method')
            when 'iid' then window_variance / window_size
            when 'ar1'
                then if(
                        raw_phi > 0,
                        ar1_mean_variance(drift_variance, phi, gamma0 - drift_variance, window_size),
                        gamma0 / window_size
                    )
            when 'reml'
                -- a constant curve leaves only rounding in the likelihood: no spread, as under ar1
                then if(
                        gamma0 > 0,
                        ar1_mean_variance(reml_scale, reml_phi, reml_scale * reml_noise_ratio, window_size),
                        0
                    )
            else error('ci_method must be ar1, reml or iid, not ' || getvariable('ci_method'))
        end as variance,
        if(raw_phi > 0, ar1_mean_variance(drift_variance, phi, gamma0 - drift_variance, fit_size), gamma0 / fit_size)
            as fit_variance,
        if(getvariable('ci_method') = 'iid', window_variance, gamma0) as epoch_variance,
        if(getvariable('ci_method') = 'reml', reml_phi, phi) as phi
    from fits
    where window_size >= 2 and (fit_size >= 5 or getvariable('ci_method') = 'iid')
),

-- degrees of freedom: `ar1`, the fit's effective n − 1 (the variance is estimated from the fit's values); `iid`,
-- the window's n − 1
intervals as (
    select
        run_id,
        sqrt(variance) as matched_std_error,
        case when variance > 0 then epoch_variance / variance when variance = 0 then window_size end
            as matched_effective_n,
        -- `reml`: none, a normal quantile
        if(getvariable('ci_method') = 'reml', null, greatest(
            if(getvariable('ci_method') = 'ar1' and fit_variance > 0, epoch_variance / fit_variance, window_size) - 1, 1
        )) as matched_ci_df,
        if(getvariable('ci_method') in ('ar1', 'reml'), phi, null) as matched_ar_coefficient
    from window_variances
),

-- the window's values in order, for the interquartile mean
window_ranks as (
    select
        run_id,
        mean_reward,
        row_number() over (partition by run_id order by mean_reward, epoch) as value_rank,
        count(*) over (partition by run_id) as n_values
    from fit_values
    where in_window
),

iqms as (
    select
        run_id,
        avg(mean_reward order by value_rank) as matched_iqm
    from window_ranks
    where value_rank > n_values // 4 and value_rank <= n_values - n_values // 4
    group by run_id
),

final as (
    select
        horizons.run_id,
        horizons.first_epoch,
        horizons.last_epoch,
        horizons.n_epochs,
        horizons.last_epoch - horizons.first_epoch + 1 - horizons.n_epochs as missing_epochs,
        windows.final_reward,
        horizons.auc_reward,
        horizons.peak_reward_ema,
        windows.peak_epoch,
        horizons.matched_horizon,
        windows.matched_reward,
        windows.matched_reward - interval_quantile((1 - getvariable('ci_level')) / 2, intervals.matched_ci_df)
        * intervals.matched_std_error as matched_ci_low,
        windows.matched_reward + interval_quantile((1 - getvariable('ci_level')) / 2, intervals.matched_ci_df)
        * intervals.matched_std_error as matched_ci_high,
        iqms.matched_iqm,
        intervals.matched_effective_n,
        final_snapshot.snapshot_id as final_snapshot_id,
        best_snapshot.snapshot_id as best_snapshot_id,
        matched_snapshot.snapshot_id as matched_snapshot_id,
        horizons.ablation,
        windows.matched_epoch,
        intervals.matched_std_error,
        intervals.matched_ci_df,
        intervals.matched_ar_coefficient
    from horizons
    inner join windows using (run_id)
    left join intervals using (run_id)
    left join iqms using (run_id)
    left join snapshot_ids as final_snapshot
        on horizons.run_id = final_snapshot.run_id and horizons.last_epoch = final_snapshot.epoch
    left join snapshot_ids as best_snapshot
        on horizons.run_id = best_snapshot.run_id and windows.peak_epoch = best_snapshot.epoch
    left join snapshot_ids as matched_snapshot
        on horizons.run_id = matched_snapshot.run_id and windows.matched_epoch = matched_snapshot.epoch
)

select * from final
order by run_id
