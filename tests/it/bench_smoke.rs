//! A tiny run of the benchmark (`bench/`) against this build of mediatord: a few hundred events to
//! one subscriber, a couple of permissions, a few sessions. It proves the load client and its
//! scenarios work and produce sane numbers; it judges no performance target (that is
//! `bench/run.sh`, which writes docs/benchmarks.md and never runs in CI). No qwen serve, no npm.

use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_benchmark_runs_every_scenario_against_mediatord_and_reports_sane_numbers() {
    let run = mediatord_bench::smoke(Path::new(env!("CARGO_BIN_EXE_mediatord")));
    let (direct, daemon) = tokio::time::timeout(std::time::Duration::from_secs(120), run)
        .await
        .expect("the smoke run finishes within two minutes");
    assert!(direct.failures.is_empty(), "direct stdio runs failed: {:?}", direct.failures);
    assert!(daemon.failures.is_empty(), "mediatord runs failed: {:?}", daemon.failures);
    assert!(daemon.refusals.is_empty(), "mediatord refused: {:?}", daemon.refusals);

    let plan = mediatord_bench::Plan::smoke();
    let relays = daemon.relay.iter().chain(&daemon.acp_relay).flat_map(|(_, runs)| runs).chain(&daemon.paced);
    for r in relays.chain(&direct.blast).chain(&direct.paced) {
        assert_eq!(r.received, r.expected_per_sub * r.subscribers as u64, "every update arrives: {r:?}");
        assert_eq!((r.evicted, r.incomplete), (0, 0), "{r:?}");
        assert!(r.delivered_per_s > 100.0 && r.window_s > 0.0, "{r:?}");
        // p50 is 0 only when no latency was measured (an empty sample); p50 <= p99 holds by construction.
        assert!(r.p50_us > 0 && r.p99_us < 10_000_000, "latencies measured, under 10 s: {r:?}");
    }
    // The load client's own CPU is measured wherever it reads SSE frames or the agent's lines.
    let sse = daemon.relay.iter().flat_map(|(_, runs)| runs).chain(&daemon.paced);
    for r in sse.chain(&direct.blast).chain(&direct.paced) {
        assert!(r.reader_cpu_ns_per_update.is_some_and(|ns| ns > 0.0), "the load client's CPU: {r:?}");
    }
    assert_eq!(daemon.relay.iter().map(|(_, runs)| runs.len()).sum::<usize>(), plan.subscribers.len());
    assert_eq!(
        daemon.acp_relay.iter().map(|(_, runs)| runs.len()).sum::<usize>(),
        plan.acp_connections.len()
    );
    assert_eq!(daemon.paced.len(), 1);
    // Paced at 1000/s, 100 updates take about 0.1 s.
    assert!(daemon.paced[0].window_s > 0.05, "{:?}", daemon.paced[0]);

    let [p] = daemon.permissions.as_slice() else { panic!("one permissions run: {:?}", daemon.permissions) };
    assert_eq!(p.requests, plan.permissions);
    assert!(p.per_request_ms > 0.0 && p.per_request_ms < 5_000.0, "{p:?}");

    let [p] = daemon.acp_permissions.as_slice() else {
        panic!("one /acp permissions run: {:?}", daemon.acp_permissions)
    };
    assert_eq!(p.requests, plan.permissions);
    assert!(p.per_request_ms > 0.0 && p.per_request_ms < 5_000.0, "{p:?}");
    let [a] = daemon.acp_memory.as_slice() else { panic!("one /acp memory run: {:?}", daemon.acp_memory) };
    assert_eq!((a.connections, a.incomplete), (plan.acp_memory_connections, 0), "{a:?}");
    assert!(a.before_kib > 0 && a.with_kib > 0, "{a:?}");

    let (filled, boots) = daemon.big_db.as_ref().expect("the big-database boot ran");
    assert!(filled.db_bytes >= plan.big_db_bytes && filled.events > 0, "{filled:?}");
    assert_eq!(boots.len(), plan.big_db_boots);
    assert!(boots.iter().all(|ms| *ms > 0.0 && *ms < 60_000.0), "{boots:?}");

    let [c] = daemon.create.as_slice() else { panic!("one create run: {:?}", daemon.create) };
    assert!(c.first_ms > 0.0 && c.create_p50_ms > 0.0 && c.attach_p50_ms > 0.0, "{c:?}");

    let [m] = daemon.memory.as_slice() else { panic!("one memory run: {:?}", daemon.memory) };
    let mib = |kib: u64| kib as f64 / 1024.0;
    assert!(mib(m.idle_kib) > 0.5 && mib(m.idle_kib) < 500.0, "{m:?}");
    assert!(m.sessions_kib > 0 && m.subscribers_kib.is_some_and(|k| k > 0), "{m:?}");
    assert_eq!(m.subscribers_incomplete, 0, "{m:?}");

    assert_eq!(daemon.startup_ms.len(), plan.startups);
    assert!(daemon.startup_ms.iter().all(|&ms| ms > 0.0 && ms < 10_000.0), "{:?}", daemon.startup_ms);
}
