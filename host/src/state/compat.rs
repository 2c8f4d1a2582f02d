//! Reading state databases written by pre-release Weir, before the changelog topic: they have a
//! third column family, `pending`, of checkpoints made durable before their commit (the
//! changelog has since replaced it). [`super::StateDb`] opens such a database with it, and on a
//! read-write open drops it when empty; a database whose `pending` still holds a checkpoint is
//! refused, since only the version that wrote it can decide that checkpoint's outcome.

use std::path::Path;

use rocksdb::{DB, Options};

use super::StateError;

/// The column family of checkpoints made durable before their commit, which databases written
/// before the changelog have: dropped on open when empty.
pub(super) const CF_LEGACY_PENDING: &str = "pending";

/// Whether the database in `dir` has the `pending` column family of Weir before the changelog.
pub(super) fn has_legacy_pending(options: &Options, dir: &Path) -> bool {
    DB::list_cf(options, dir).is_ok_and(|names| names.iter().any(|n| n == CF_LEGACY_PENDING))
}

/// Drops the `pending` column family of a database written before the changelog; refuses one
/// that still holds a checkpoint whose outcome that version had not decided.
pub(super) fn drop_legacy_pending(db: &mut DB, dir: &Path) -> Result<(), StateError> {
    let empty = db.cf_handle(CF_LEGACY_PENDING).is_some_and(|cf| {
        let mut iter = db.raw_iterator_cf(cf);
        iter.seek_to_first();
        !iter.valid()
    });
    if !empty {
        return Err(StateError::Corrupt(format!(
            "state database {} holds a pending checkpoint written by a Weir before the changelog; \
             run that version once to resolve it, or delete the directory and restore the state from the changelog",
            dir.display()
        )));
    }
    db.drop_cf(CF_LEGACY_PENDING)
        .map_err(|e| StateError::Backend(format!("cannot drop the pending column family of {}: {e}", dir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StateDb;

    #[test]
    fn a_database_from_before_the_changelog_opens_when_nothing_is_pending() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut options = Options::default();
            options.create_if_missing(true);
            options.create_missing_column_families(true);
            let db = DB::open_cf(&options, dir.path(), ["state", "pending", "meta"]).unwrap();
            db.put_cf(db.cf_handle("state").unwrap(), b"a", b"1").unwrap();
        }
        let db = StateDb::open(dir.path()).unwrap();
        assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
        drop(db);
        {
            let options = Options::default();
            let mut db = DB::open_cf(&options, dir.path(), ["state", "meta"]).unwrap();
            db.create_cf("pending", &options).unwrap();
            db.put_cf(db.cf_handle("pending").unwrap(), b"\0\0\0\0\0\0\0\x03h", b"p-1").unwrap();
        }
        let error = StateDb::open(dir.path()).unwrap_err();
        assert!(
            error.to_string().contains("pending checkpoint") && error.to_string().contains("before the changelog"),
            "{error}"
        );
    }
}
