const $ = (id) => document.getElementById(id);
const KINDS = ["top", "bottom", "outer", "shoes"];

// an error stays until the user's next action: a background load that succeeds (the
// item list after a failed suggestion) must not hide it
function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

async function api(path, options) {
  const resp = await fetch(path, options);
  const body = resp.status === 204 ? null : await resp.json();
  if (!resp.ok) {
    showError(body && body.error ? body.error : "Request failed");
    throw new Error(String(resp.status));
  }
  return body;
}

let shown = 0;
async function loadItems() {
  const mine = ++shown;
  const items = await api("/api/items");
  if (mine !== shown) return;  // a newer load started: its data is newer
  $("items").replaceChildren(...items.map((item) => {
    const li = document.createElement("li");
    const name = document.createElement("span");
    name.className = "item-name";
    name.textContent = item.name;
    const remove = document.createElement("button");
    remove.className = "remove";
    remove.type = "button";
    remove.textContent = "Remove";
    remove.addEventListener("click", async () => {
      showError("");
      await api(`/api/items/${item.id}`, {method: "DELETE"});
      loadItems();
    });
    li.append(name, " ", remove);
    return li;
  }));
}

$("item-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  showError("");
  const body = {
    name: $("item-name").value.trim(),
    kind: $("item-kind").value,
    warmth: Number($("item-warmth").value),
    rain_ok: $("item-rain").checked,
  };
  if (!body.name) return showError("Give the item a name.");
  await api("/api/items", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
  $("item-name").value = "";
  $("item-rain").checked = false;
  loadItems();
});

$("suggest").addEventListener("click", async () => {
  showError("");
  const s = await api("/api/suggestion?city=" + encodeURIComponent($("city").value.trim()));
  $("temp").textContent = s.display;
  $("outfit").replaceChildren(...KINDS.filter((k) => s.outfit[k]).map((k) => {
    const li = document.createElement("li");
    li.textContent = `${k}: ${s.outfit[k].name}`;
    return li;
  }));
});

loadItems();
