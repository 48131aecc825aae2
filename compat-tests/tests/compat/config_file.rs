//! Settings from a `--config` TOML file and `SHARDGATE_<FLAG>`
//! environment variables, with the precedence flag > environment > file >
//! default, as `getCmdLineOpts` reports them and as the server behaves.

use compat_tests::{
    bson::{doc, Document},
    expect_failure, TestServer,
};

#[tokio::test]
async fn flags_beat_the_environment_which_beats_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shardgate.toml");
    std::fs::write(
        &file,
        "max-connections = 300\ninitial-partitions = 3\njavascript = \"off\"\n",
    )
    .unwrap();
    let srv = TestServer::start_with_env(
        &[
            ("SHARDGATE_MAX_CONNECTIONS", "400"),
            ("SHARDGATE_INITIAL_PARTITIONS", "6"),
        ],
        &[
            "--config",
            file.to_str().unwrap(),
            "--max-connections",
            "250",
        ],
    )
    .await;

    let opts = srv
        .db("admin")
        .run_command(doc! {"getCmdLineOpts": 1})
        .await
        .unwrap();
    let parsed = opts.get_document("parsed").unwrap();
    assert_eq!(parsed.get_str("config"), Ok(file.to_str().unwrap()));
    let settings = parsed.get_document("settings").unwrap();
    let sources = parsed.get_document("settingSources").unwrap();
    let seen = |name: &str| {
        (
            settings.get_str(name).unwrap_or_default().to_string(),
            sources.get_str(name).unwrap_or("default").to_string(),
        )
    };
    assert_eq!(seen("max-connections"), ("250".into(), "flag".into()));
    assert_eq!(
        seen("initial-partitions"),
        ("6".into(), "environment".into())
    );
    assert_eq!(seen("javascript"), ("off".into(), "file".into()));
    assert_eq!(
        seen("ttl-monitor-interval-secs"),
        ("60".into(), "default".into())
    );

    // The file's setting is in force: scripts are refused.
    let coll = srv.db("cfg").collection::<Document>("c");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    let r = coll.find_one(doc! {"$where": "true"}).await;
    expect_failure(r, 6108304, "Location6108304");
    // And the environment's: a collection sharded without
    // numInitialChunks gets 6 partitions.
    srv.db("admin")
        .run_command(doc! {"shardCollection": "cfg.s", "key": {"k": "hashed"}})
        .await
        .unwrap();
    let chunks = compat_tests::config_chunks(&srv.new_client().await, "cfg.s").await;
    assert_eq!(chunks.len(), 6);
}
