"""Device telemetry, sampled while the decode loop runs: backends read figures, samplers schedule the reads.

A `Sampler` reads its backends every `interval_ms` on a fixed schedule and keeps one row per read: `t_ns`
(time.perf_counter_ns, the clock of `probe.capture.loop.Generation`, so rows line up with steps and traces) plus
named figures with their units in the names. probe.analysis.records.telemetry summarises the rows over the decode
phases (torch-free, so an analysis never needs the capture side).

| figure             | backend | source                                                  | kind    |
|--------------------|---------|---------------------------------------------------------|---------|
| gpu_mem_used_bytes | nvml    | nvmlDeviceGetMemoryInfo().used                          | level   |
| gpu_util_pct       | nvml    | nvmlDeviceGetUtilizationRates().gpu (kernel busy %)     | level   |
| mem_util_pct       | nvml    | nvmlDeviceGetUtilizationRates().memory (DRAM busy %)    | level   |
| sm_clock_mhz       | nvml    | nvmlDeviceGetClockInfo(NVML_CLOCK_SM)                   | level   |
| mem_clock_mhz      | nvml    | nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)                  | level   |
| power_w            | nvml    | field NVML_FI_DEV_POWER_INSTANT, else GetPowerUsage, mW | level   |
| energy_j           | nvml    | nvmlDeviceGetTotalEnergyConsumption, mJ (Volta+)        | counter |
| rss_bytes          | cpu     | /proc/self/stat rss (psutil elsewhere)                  | level   |
| proc_cpu_pct       | cpu     | process CPU time / wall time; 100 = one core busy       | rate    |
| sys_cpu_pct        | cpu     | /proc/stat busy / total ticks; 100 = every core busy    | rate    |
| threads            | cpu     | /proc/self/stat num_threads: OS threads of this process | level   |

The kind decides the honest time-weighted mean over a window. A level is a value at an instant, linear between
rows. A rate is the average over the interval since the previous row, constant over that interval. A counter is
cumulative: only differences mean something. A missing figure is absent or NaN in rows and None in summaries,
never 0.

Resolution caveats: NVML's utilization is a busy fraction over its own period (1/6 s to 1 s, per product), so
rows 10 ms apart repeat it. GetPowerUsage averages over 1 s on Ampere and newer, which is why the instant field
comes first. /proc/stat counts 10 ms ticks: one `sys_cpu_pct` row is coarse, but its time-weighted mean over a
window is exact but for the two rows at its edges. Likewise the kernel brings another running thread's CPU time
up to date only at its scheduler ticks, so a single 10 ms `proc_cpu_pct` row can even read above 100 x cores:
the errors cancel in the mean, not in the peak, so read rate peaks as "busiest 10 ms, give or take a tick".
"""
