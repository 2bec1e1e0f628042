//! Issue #27, finding 1: an acknowledged security decision is on disk, or it is not acknowledged
//! (`docs/operations.md#durability`). Another process holds the state database's write lock (a
//! backup, an `sqlite3` shell; on PostgreSQL, another session's `LOCK TABLE`): a revocation, a
//! workspace rule's removal and a pairing are each refused `503 store_unavailable` and changed
//! nothing, in memory or after a restart; `/health?deep=1` says `degraded` and counts the lost
//! writes. Once the lock is gone they go through, and what was answered survives a `kill -9`.

use serde_json::{Value, json};

use crate::support::{Daemon, Reply, StateLock, http, send};

const TOKEN: &str = "operator-secret";

fn op(req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    req.bearer_auth(TOKEN)
}

/// The daemon of one test on `state`, with the operator's token.
fn start(state: &std::path::Path, workspace: &std::path::Path) -> Daemon {
    Daemon::start_with(workspace, &["--token", TOKEN, "--state-dir", state.to_str().expect("utf-8")], &[])
}

async fn pairing_code(d: &Daemon, name: &str) -> String {
    let issued = send(op(http().post(d.url("/devices/pairing"))).json(&json!({"name": name}))).await.ok();
    issued["code"].as_str().expect("code").to_owned()
}

async fn exchange(d: &Daemon, code: &str) -> Reply {
    send(http().post(d.url("/devices/pair")).json(&json!({"code": code}))).await
}

async fn capabilities_as(d: &Daemon, credential: &str) -> u16 {
    send(http().get(d.url("/capabilities")).bearer_auth(credential)).await.status
}

fn rules_path(workspace: &std::path::Path) -> String {
    format!("/workspace/{}/permission-rules", workspace.to_string_lossy().replace('/', "%2F"))
}

async fn rule_ids(d: &Daemon, workspace: &std::path::Path) -> Vec<String> {
    let listed = send(op(http().get(d.url(&rules_path(workspace))))).await.ok();
    listed["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["ruleId"].as_str().map(str::to_owned))
        .collect()
}

fn assert_refused(reply: &Reply, what: &str) {
    assert_eq!(
        (reply.status, reply.body["code"].as_str(), reply.header("retry-after")),
        (503, Some("store_unavailable"), Some("5")),
        "{what}: {}",
        reply.text
    );
}

#[tokio::test]
async fn decisions_the_locked_database_cannot_take_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("canonical");
    let (state, workspace) = (root.join("state"), root.join("ws"));
    std::fs::create_dir(&workspace).expect("workspace");
    let d = start(&state, &workspace);
    let paired = exchange(&d, &pairing_code(&d, "phone").await).await.ok();
    let (device_id, credential) =
        (paired["deviceId"].as_str().expect("id"), paired["token"].as_str().expect("token"));
    let created = send(
        op(http().post(d.url(&rules_path(&workspace)))).json(&json!({"effect": "allow", "kinds": ["edit"]})),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let rule_id = created.body["rule"]["ruleId"].as_str().expect("ruleId").to_owned();
    let waiting_code = pairing_code(&d, "tablet").await;
    let healthy: Value = send(op(http().get(d.url("/health?deep=1")))).await.ok();
    assert_eq!((healthy["status"].as_str(), &healthy["store"]["writesFailed"]), (Some("ok"), &json!(0)));

    // Another process takes the write lock and keeps it.
    let other = StateLock::take(&state, "devices, workspace_rules, pairing_claims").await;
    let revoke = send(op(http().delete(d.url(&format!("/devices/{device_id}")))));
    let delete = send(op(http().delete(d.url(&format!("{}/{rule_id}", rules_path(&workspace))))));
    let pair = exchange(&d, &waiting_code);
    let (revoke, delete, pair) = tokio::join!(revoke, delete, pair);
    assert_refused(&revoke, "the revocation");
    assert_refused(&delete, "the rule's removal");
    assert_refused(&pair, "the pairing");
    assert_eq!(pair.body["token"], Value::Null, "no credential was handed out");
    // Nothing changed in memory either: the device still works, the rule still applies.
    assert_eq!(capabilities_as(&d, credential).await, 200);
    assert_eq!(rule_ids(&d, &workspace).await, std::slice::from_ref(&rule_id));
    let deep: Value = send(op(http().get(d.url("/health?deep=1")))).await.ok();
    assert_eq!(deep["status"], "degraded", "{deep}");
    assert!(deep["store"]["writesFailed"].as_u64().is_some_and(|n| n >= 3), "{deep}");
    assert!(deep["store"]["commitsFailed"].as_u64().is_some_and(|n| n >= 1), "{deep}");
    let metrics = send(op(http().get(d.url("/metrics")))).await.text;
    let failed =
        metrics.lines().find(|l| l.starts_with("mediatord_store_writes_failed_total ")).unwrap_or_default();
    assert!(
        failed.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n >= 3),
        "{failed:?}"
    );

    // The lock is released: the code that was refused still pairs.
    other.release().await;
    let tablet = exchange(&d, &waiting_code).await.ok();
    let tablet_credential = tablet["token"].as_str().expect("token").to_owned();
    drop(d); // SIGKILL

    let d = start(&state, &workspace);
    assert_eq!(capabilities_as(&d, credential).await, 200, "the refused revocation did not happen");
    assert_eq!(capabilities_as(&d, &tablet_credential).await, 200, "the answered pairing survived");
    assert_eq!(
        rule_ids(&d, &workspace).await,
        std::slice::from_ref(&rule_id),
        "the refused removal did not happen"
    );
    assert_eq!(send(op(http().delete(d.url(&format!("/devices/{device_id}"))))).await.status, 204);
    assert_eq!(
        send(op(http().delete(d.url(&format!("{}/{rule_id}", rules_path(&workspace)))))).await.status,
        204
    );
    drop(d);

    let d = start(&state, &workspace);
    assert_eq!(capabilities_as(&d, credential).await, 401, "the answered revocation survived");
    assert_eq!(rule_ids(&d, &workspace).await, Vec::<String>::new(), "the answered removal survived");
}
