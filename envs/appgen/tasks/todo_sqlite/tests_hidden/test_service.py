import pytest

from apptest import files


@pytest.fixture
def svc(tmp_path):
    from todo.service import TodoService

    s = TodoService(str(tmp_path / "todo.db"))
    yield s
    s.close()


def test_add_validates(svc):
    from todo.models import TodoError

    with pytest.raises(TodoError):
        svc.add("   ")
    with pytest.raises(TodoError):
        svc.add("x", priority="urgent")
    with pytest.raises(TodoError):
        svc.add("x", due="2024-13-01")
    t = svc.add("  Write report ", due="2024-02-29", tags=["work", "b", "work"])
    assert (t.title, t.due, t.tags, t.done, t.priority) == (
        "Write report",
        "2024-02-29",
        ["b", "work"],
        False,
        "medium",
    )


def test_to_dict_keys(svc):
    t = svc.add("a")
    assert t.to_dict() == {
        "id": 1,
        "title": "a",
        "priority": "medium",
        "due": None,
        "done": False,
        "tags": [],
    }


def test_get_unknown(svc):
    from todo.models import TodoError

    with pytest.raises(TodoError, match="42"):
        svc.get(42)


def test_status_filters(svc):
    svc.add("a")
    svc.add("b")
    svc.complete(1)
    assert [t.id for t in svc.list()] == [2]
    assert [t.id for t in svc.list(status="done")] == [1]
    assert [t.id for t in svc.list(status="all")] == [1, 2]
    svc.reopen(1)
    assert [t.id for t in svc.list()] == [1, 2]


def test_orders(svc):
    svc.add("a", priority="low", due="2024-03-01")
    svc.add("b", priority="high")
    svc.add("c", priority="medium", due="2024-01-15")
    svc.add("d", priority="high", due="2024-03-01")
    assert [t.id for t in svc.list(order="due")] == [3, 1, 4, 2]
    assert [t.id for t in svc.list(order="priority")] == [2, 4, 3, 1]


def test_bad_status_and_order(svc):
    from todo.models import TodoError

    with pytest.raises(TodoError):
        svc.list(status="later")
    with pytest.raises(TodoError):
        svc.list(order="title")


def test_tag_filter(svc):
    svc.add("a", tags=["home"])
    svc.add("b", tags=["work"])
    svc.add("c", tags=["home", "work"])
    assert [t.id for t in svc.list(tag="home")] == [1, 3]


def test_delete_and_cascade(svc, tmp_path):
    from todo.models import TodoError

    svc.add("a", tags=["x", "y"])
    svc.add("b")
    svc.delete(1)
    assert [t.id for t in svc.list(status="all")] == [2]
    with pytest.raises(TodoError):
        svc.delete(1)
    with pytest.raises(TodoError):
        svc.complete(99)
    conn = files.sqlite(tmp_path / "todo.db")  # a private copy, read without following links
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    tag_tables = [t for t in tables if "tag" in t.lower()]
    assert tag_tables, tables
    for table in tag_tables:
        assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0
    conn.close()


def test_search_case_insensitive(svc):
    svc.add("Buy Milk")
    svc.add("milk the cow")
    svc.add("bread")
    svc.complete(2)
    assert [t.id for t in svc.search("MILK")] == [1, 2]


def test_overdue(svc):
    svc.add("a", due="2024-01-10")
    svc.add("b", due="2024-01-01")
    svc.add("c", due="2024-02-01")
    svc.add("d")
    svc.add("e", due="2023-12-01")
    svc.complete(5)
    assert [t.id for t in svc.overdue("2024-01-31")] == [2, 1]


def test_persistence(tmp_path):
    from todo.service import TodoService

    path = str(tmp_path / "p.db")
    a = TodoService(path)
    a.add("keep me", tags=["t"])
    a.complete(1)
    a.close()
    b = TodoService(path)
    t = b.get(1)
    assert (t.title, t.done, t.tags) == ("keep me", True, ["t"])
    assert b.add("next").id == 2
    b.close()
