const list = document.getElementById("entries");
const error = document.getElementById("error");

function render(entry) {
  const li = document.createElement("li");
  const name = document.createElement("span");
  name.className = "name";
  name.textContent = entry.name;
  const message = document.createElement("span");
  message.className = "message";
  message.textContent = entry.message;
  li.append(name, message);
  return li;
}

function showError(text) {
  error.textContent = text;
  error.hidden = !text;
}

let shown = 0;
async function load() {
  const mine = ++shown;
  const entries = await (await fetch("/api/entries")).json();
  if (mine !== shown) return;  // a newer load started: its data is newer
  list.replaceChildren(...entries.map(render));
}

document.getElementById("sign-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const name = document.getElementById("name").value.trim();
  const message = document.getElementById("message").value.trim();
  if (!name || !message) return showError("Please enter your name and a message.");
  if (name.length > 40) return showError("The name is longer than 40 characters.");
  if (message.length > 200) return showError("The message is longer than 200 characters.");
  const resp = await fetch("/api/entries", {
    method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({name, message}),
  });
  const body = await resp.json();
  if (!resp.ok) return showError(body.error || "Could not sign.");
  showError("");
  load();  // not list.prepend: the load-time list, if still on its way, would drop the entry
  document.getElementById("name").value = "";
  document.getElementById("message").value = "";
});

load();
