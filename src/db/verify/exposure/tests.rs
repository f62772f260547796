use std::os::unix::fs::PermissionsExt;

use super::*;

fn on(db: &Path, sharing: Sharing) -> Config {
    Config {
        database: Database::Sqlite(db.to_owned()),
        sharing,
        ..Config::in_dir(Path::new("/nowhere"))
    }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Each of a database's files that lets in someone the sharing leaves out is named,
/// with a `chmod` that closes it (quoted for a shell when its name needs it);
/// other files beside it, and modes the sharing allows, are not.
#[test]
fn wide_database_files_are_named_with_the_command_that_closes_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("it's here.db");
    for (name, mode) in [
        ("it's here.db", 0o644),
        ("it's here.db-wal", 0o600),
        ("it's here.db-shm", 0o660),
        ("it's here.db.v1.bak", 0o604),
        ("it's here.db.notes", 0o666),
        ("other.db", 0o666),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, "").unwrap();
        chmod(&path, mode);
    }
    let found = exposures(&on(&db, Sharing::Owner));
    let named: Vec<(String, ExposureKind)> = found
        .iter()
        .map(|e| {
            (
                e.path.file_name().unwrap().to_string_lossy().into_owned(),
                e.kind,
            )
        })
        .collect();
    assert_eq!(
        named,
        [
            ("it's here.db".to_owned(), ExposureKind::WideMode),
            ("it's here.db-shm".to_owned(), ExposureKind::WideMode),
            ("it's here.db.v1.bak".to_owned(), ExposureKind::WideMode),
        ]
    );
    let quoted = format!("'{}'", db.display().to_string().replace('\'', r"'\''"));
    assert!(
        found[0].message.ends_with(&format!(
            "is open to its group and others (mode 0644): chmod 600 {quoted} closes it"
        )),
        "{}",
        found[0]
    );
    assert!(
        found[2].message.contains("open to others (mode 0604)"),
        "{}",
        found[2]
    );
    let group: Vec<_> = exposures(&on(&db, Sharing::Group))
        .into_iter()
        .map(|e| e.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(group, ["it's here.db", "it's here.db.v1.bak"]);
    assert!(key_file_exposure(&db, Sharing::Owner).is_some());
    assert!(key_file_exposure(&dir.path().join("missing"), Sharing::Owner).is_none());
}

/// Beside an encrypted database (told by its bytes, or by the key in the
/// configuration), a backup that begins with SQLite's plain header is named for
/// removal; beside a plain one it is not.
#[test]
fn a_plain_backup_beside_an_encrypted_database_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    std::fs::write(&db, vec![0x5a; 4096]).unwrap();
    let bak = dir.path().join("s.db.v1.bak");
    let mut plain = crate::db::cipher::MAGIC.to_vec();
    plain.resize(4096, 0);
    std::fs::write(&bak, &plain).unwrap();
    for path in [&db, &bak] {
        chmod(path, 0o600);
    }
    let found = exposures(&on(&db, Sharing::Owner));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, ExposureKind::PlaintextBackup);
    assert!(found[0].message.contains("remove it (rm "), "{}", found[0]);
    std::fs::write(&db, &plain).unwrap();
    assert!(
        exposures(&on(&db, Sharing::Owner)).is_empty(),
        "a plain database's backup"
    );
    let config = Config {
        key: Some(crate::config::DatabaseKey::generate().unwrap()),
        ..on(&db, Sharing::Owner)
    };
    assert_eq!(
        exposures(&config).len(),
        1,
        "the key says it is to be encrypted"
    );
}
