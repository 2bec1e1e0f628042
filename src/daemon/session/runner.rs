//! A session's turn runner: one task per session takes the prompt FIFO's jobs in order, runs each
//! as a turn of the agent (snapshots around it, the tag its events carry), answers its caller, and
//! at the session's end cancels what is left within [`TURN_CANCEL_GRACE`].

use super::*;

fn set_active(session: &Session, running: Option<Running>) {
    *lock(&session.active) = running;
}

pub(super) async fn run_turns(
    session: Arc<Session>,
    mut queue: mpsc::Receiver<PromptJob>,
    on_finished: Box<dyn FnOnce(&str) + Send>,
    claim: Claim,
) {
    loop {
        let job = tokio::select! {
            biased;
            _ = session.ending.cancelled() => break,
            job = queue.recv() => match job { Some(job) => job, None => break },
        };
        run_turn(&session, job).await;
    }
    // Requests raised outside any turn (or while idle) are cancelled here; from now on new ones are
    // answered `cancelled` at once.
    session.permissions().cancel_all(ResolvedBy::SessionClosed);
    let reason = session.end_reason.get().cloned().unwrap_or(EndReason::Shutdown);
    {
        // No enqueue is between its echo and its send now, and none will pass `is_ending` again.
        let _admission = lock(&session.admission);
        queue.close();
    }
    while let Ok(job) = queue.try_recv() {
        finish_turn(&session, job, Err(TurnError::Ended(reason.cause())));
    }
    let terminal = match &reason {
        EndReason::Closed { closed_by } => (
            EventKind::SessionClosed,
            json!({"sessionId": session.id, "reason": "closed_by_client", "closedBy": closed_by}),
        ),
        EndReason::Shutdown => {
            (EventKind::SessionClosed, json!({"sessionId": session.id, "reason": "daemon_shutdown"}))
        }
        EndReason::Died(exit) => (
            EventKind::SessionDied,
            json!({
                "sessionId": session.id, "reason": "agent_exited", "exitCode": exit.code,
                // `signal` per the protocol; `signalCode` is the name @qwen-code/sdk's event types use.
                "signal": exit.signal, "signalCode": exit.signal_name(),
            }),
        ),
    };
    // Out of the tables first: a client that sees the terminal event and asks again gets a 404.
    on_finished(&session.id);
    session.bus.publish_terminal(terminal.0, &terminal.1);
    // A client's close ends the session for good; a shutdown or an agent's death leaves it
    // dormant: it can be resumed.
    let (state, why) = match &reason {
        EndReason::Closed { .. } => (SessionState::Closed, "closed_by_client"),
        EndReason::Shutdown => (SessionState::Dormant, "daemon_shutdown"),
        EndReason::Died(_) => (SessionState::Dormant, "agent_exited"),
    };
    session.store.session_ended(&session.id, state, why, session.bus.last_id(), crate::clock::now_ms());
    session.notifier.offer(session.source(), terminal.0, &terminal.1);
    // Everything this session writes under its id is handed over: the id may serve another now.
    drop(claim);
    session.finished.cancel();
}

async fn run_turn(session: &Arc<Session>, mut job: PromptJob) {
    if job.caller_gone.is_cancelled() {
        // The blocking caller left before the turn started: nothing to ask the agent.
        finish_turn(session, job, Ok(json!({"stopReason": "cancelled"})));
        return;
    }
    // Counted before the turn shows as running: a client that sees it running and cancels is
    // counted against it.
    let cancels = job.cancels_at_start.unwrap_or_else(|| session.cancels.load(Ordering::SeqCst));
    set_active(session, Some(Running::of(&job)));
    // The workspace as the turn found it: what its change set starts from. Before the prompt
    // reaches the agent, so nothing the agent does is missed.
    let begun = session.turns.begin(&session.workspace).await;
    let at_send = session.cancels.load(Ordering::SeqCst);
    if at_send != cancels {
        // Cancelled before the agent had the prompt: the agent ignored that cancel, so it is
        // honoured here (no change set: the agent did nothing).
        drop(begun);
        set_active(session, None);
        finish_turn(session, job, Ok(json!({"stopReason": "cancelled"})));
        return;
    }
    let params = std::mem::take(&mut job.params);
    let mut call = session.agent.queue_call(method::SESSION_PROMPT, params, None).await;
    if session.cancels.load(Ordering::SeqCst) != at_send {
        // A cancel came while the prompt was being queued: its `session/cancel` may have gone to
        // the agent first, which ignores a cancel with no prompt running (the turn would run on,
        // or never end). Asked again now, the cancel follows the prompt; an agent that had it
        // after the prompt already is asked twice about the same turn, which changes nothing.
        session.cancel().await;
    }
    let result = tokio::select! {
        biased;
        r = &mut call => r,
        _ = job.caller_gone.cancelled() => {
            session.cancel().await;
            tokio::select! {
                biased;
                r = &mut call => r,
                _ = session.ending.cancelled() => cancel_for_ending(session, &mut call).await,
            }
        }
        _ = session.ending.cancelled() => cancel_for_ending(session, &mut call).await,
    };
    let result = result.map_err(TurnError::from).and_then(|raw| {
        serde_json::from_str::<Value>(raw.get()).map_err(|_| TurnError::Agent("invalid prompt result".into()))
    });
    let changes = match begun {
        Some(begun) => {
            session.turns.end(session.as_ref(), begun, &job.prompt_id, job.originator.as_deref()).await
        }
        None => None,
    };
    // Idle before the turn event goes out: whoever sees it (or the blocking reply) and asks for
    // the session's status must not still see `hasActivePrompt: true`.
    set_active(session, None);
    finish_turn_with(session, job, result, changes);
}

/// The session is ending while a turn runs: ask the agent to stop and give it a moment to answer.
async fn cancel_for_ending(
    session: &Session,
    call: &mut BoxFuture<'_, Result<Box<RawValue>, CallError>>,
) -> Result<Box<RawValue>, CallError> {
    if !matches!(session.end_reason.get(), Some(EndReason::Died(_))) {
        session.agent.notify(method::SESSION_CANCEL, json!({"sessionId": session.id})).await;
    }
    session.permissions().cancel_all(ResolvedBy::SessionClosed);
    match tokio::time::timeout(TURN_CANCEL_GRACE, call).await {
        Ok(r) => r,
        Err(_) => {
            let code = session.end_reason.get().map_or(EndCause::SessionClosed, EndReason::cause).code();
            Err(CallError::Exited(format!("the turn was ended ({code})")))
        }
    }
}

/// Publishes the one turn event of `job` and answers its blocking caller.
fn finish_turn(session: &Session, job: PromptJob, result: TurnResult) {
    finish_turn_with(session, job, result, None);
}

/// [`finish_turn`] of a turn that changed files: `changes`, its change set's stats, go with the
/// turn's notification (not its event: `turn_changes` came just before it on the stream).
fn finish_turn_with(session: &Session, job: PromptJob, result: TurnResult, changes: Option<Value>) {
    let tag = PromptTag { prompt_id: Some(job.prompt_id.clone()), originator: job.originator.clone() };
    let outcome = match &result {
        Ok(value) if value.get("stopReason").and_then(Value::as_str) == Some("cancelled") => "cancelled",
        Ok(_) => "completed",
        Err(e) => e.code(),
    };
    session.metrics.prompt_finished(outcome, job.queued_at.elapsed());
    let (kind, data) = match &result {
        Ok(value) => {
            let stop = value.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn");
            let data = json!({"sessionId": session.id, "promptId": job.prompt_id, "stopReason": stop});
            (EventKind::TurnComplete, data)
        }
        Err(e) => {
            let message = match e {
                TurnError::Agent(m) | TurnError::Exited(m) => m.clone(),
                TurnError::Ended(cause) => format!("the prompt did not run: {}", cause.code()),
            };
            let data = json!({"sessionId": session.id, "promptId": job.prompt_id, "message": message, "code": e.code()});
            (EventKind::TurnError, data)
        }
    };
    session.bus.publish(kind, &data, &tag);
    match changes {
        Some(changes) => {
            let mut noticed = data;
            noticed["changes"] = changes;
            session.notifier.offer(session.source(), kind, &noticed);
        }
        None => session.notifier.offer(session.source(), kind, &data),
    }
    session.pending_prompts.fetch_sub(1, Ordering::AcqRel);
    if let Some(reply) = job.reply {
        let _ = reply.send(result);
    }
}
