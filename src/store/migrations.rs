//! The schema's migrations, one `.sql` file per version and database (`migrations/sqlite/`,
//! `migrations/postgres/`): the same file names in both, so one version number means one schema
//! in both databases (written in each one's types). Listed once, below, for both: a version
//! cannot be added to one database and forgotten in the other. Index `i` takes the schema from
//! version `i` to `i + 1`; a file is never edited once released (a database that applied it keeps
//! what it said), a change is a new file.

/// Lists each file once and makes both databases' lists of it.
macro_rules! versions {
    ($($file:literal),+ $(,)?) => {
        pub(super) const SQLITE: &[&str] = &[$(include_str!(concat!("migrations/sqlite/", $file))),+];
        pub(super) const POSTGRES: &[&str] = &[$(include_str!(concat!("migrations/postgres/", $file))),+];
    };
}

versions![
    "0001_sessions_events_audit_rules.sql",
    "0002_devices.sql",
    "0003_event_runs.sql",
    "0004_fleet.sql",
    "0005_pairing_codes.sql",
    "0006_turns.sql",
    "0007_people.sql",
];
