from kvstore.store import KVStore


def test_put_get_reopen(tmp_path):
    store = KVStore(str(tmp_path / "db"))
    store.put("a", "1")
    store.close()
    assert KVStore(str(tmp_path / "db")).get("a") == "1"
