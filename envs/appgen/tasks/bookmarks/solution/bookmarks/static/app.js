const $ = (id) => document.getElementById(id);
let activeTag = "";

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

let shown = 0;
async function refresh() {
  const mine = ++shown;
  const params = new URLSearchParams();
  if (activeTag) params.set("tag", activeTag);
  if ($("search").value.trim()) params.set("q", $("search").value.trim());
  const [items, tags] = await Promise.all(
    ["/api/bookmarks?" + params, "/api/tags"].map(async (path) => (await fetch(path)).json()));
  if (mine !== shown) return;  // a newer refresh started: its data is newer
  $("list").replaceChildren(...items.map((b) => {
    const li = document.createElement("li");
    li.className = "bookmark";
    const a = document.createElement("a");
    a.className = "title";
    a.href = b.url;
    a.textContent = b.title;
    const del = document.createElement("button");
    del.className = "delete";
    del.type = "button";
    del.textContent = "Delete";
    del.addEventListener("click", async () => {
      await fetch(`/api/bookmarks/${b.id}`, {method: "DELETE"});
      refresh();
    });
    li.append(a, " ", del);
    return li;
  }));
  $("tags-bar").replaceChildren(...tags.map(({tag}) => {
    const button = document.createElement("button");
    button.className = "tag" + (tag === activeTag ? " active" : "");
    button.type = "button";
    button.textContent = tag;
    button.addEventListener("click", () => {
      activeTag = activeTag === tag ? "" : tag;
      refresh();
    });
    return button;
  }));
}

$("add-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const body = {
    url: $("url").value.trim(),
    title: $("title").value.trim(),
    tags: $("tags").value.split(","),
  };
  const resp = await fetch("/api/bookmarks", {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
  });
  const data = await resp.json();
  if (!resp.ok) return showError(data.error || "Could not add.");
  showError("");
  for (const id of ["url", "title", "tags"]) $(id).value = "";
  refresh();
});

$("search").addEventListener("input", refresh);
refresh();
