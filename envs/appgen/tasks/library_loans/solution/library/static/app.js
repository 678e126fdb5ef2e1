const $ = (id) => document.getElementById(id);

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

function button(cls, label, onClick) {
  const b = document.createElement("button");
  b.className = cls;
  b.type = "button";
  b.textContent = label;
  b.addEventListener("click", onClick);
  return b;
}

async function post(path, body) {
  const resp = await fetch(path, {method: "POST", headers: {"Content-Type": "application/json"},
                                  body: JSON.stringify(body || {})});
  const data = await resp.json();
  showError(resp.ok ? "" : (data.error || "Refused."));
  return resp.ok;
}

let searches = 0;
async function searchBooks() {
  const mine = ++searches;
  const books = await (await fetch("/api/books?q=" + encodeURIComponent($("search").value.trim()))).json();
  if (mine !== searches) return;  // a newer search started: its data is newer
  $("books").replaceChildren(...books.map((b) => {
    const li = document.createElement("li");
    li.className = "book";
    const title = document.createElement("span");
    title.className = "title";
    title.textContent = b.title;
    const available = document.createElement("span");
    available.className = "available";
    available.textContent = String(b.available);
    li.append(title, " ", available, " ", button("borrow", "Borrow", async () => {
      await post("/api/loans", {isbn: b.isbn, member: $("member").value.trim(), date: $("date").value.trim()});
      refresh();
    }));
    return li;
  }));
}

let loanLoads = 0;
async function loadLoans() {
  const mine = ++loanLoads;
  const items = await (await fetch("/api/loans")).json();
  if (mine !== loanLoads) return;  // a newer load started: its data is newer
  $("loans").replaceChildren(...items.map((l) => {
    const li = document.createElement("li");
    li.className = "loan";
    li.append(`${l.title} — ${l.member}, due ${l.due} `, button("return", "Return", async () => {
      await post(`/api/loans/${l.id}/return`);
      refresh();
    }));
    return li;
  }));
}

function refresh() {
  searchBooks();
  loadLoans();
}

$("search-button").addEventListener("click", searchBooks);
loadLoans();
