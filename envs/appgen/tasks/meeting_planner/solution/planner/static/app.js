const $ = (id) => document.getElementById(id);
const people = () => $("people").value.split(",").map((p) => p.trim()).filter(Boolean);

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

let meetingLoads = 0;
async function loadMeetings() {
  const mine = ++meetingLoads;
  const items = await (await fetch("/api/meetings")).json();
  if (mine !== meetingLoads) return;  // a newer load started: its data is newer
  $("meetings").replaceChildren(...items.map((m) => {
    const li = document.createElement("li");
    li.textContent = `${m.date} ${m.start}-${m.end} ${m.title} (${m.people.join(", ")})`;
    return li;
  }));
}

let searches = 0;
async function find() {
  const mine = ++searches;
  const params = new URLSearchParams({date: $("date").value.trim(), people: people().join(","), minutes: $("minutes").value});
  const resp = await fetch("/api/slots?" + params);
  const body = await resp.json();
  if (mine !== searches) return;  // a newer search started: its data is newer
  if (!resp.ok) {
    $("slots").replaceChildren();
    return showError(body.error || "Could not find times.");
  }
  showError("");
  $("slots").replaceChildren(...body.slots.map((s) => {
    const li = document.createElement("li");
    const time = document.createElement("span");
    time.className = "time";
    time.textContent = `${s.start}-${s.end}`;
    const book = document.createElement("button");
    book.className = "book";
    book.type = "button";
    book.textContent = "Book";
    book.addEventListener("click", () => bookSlot(s.start));
    li.append(time, " ", book);
    return li;
  }));
}

async function bookSlot(start) {
  const body = {date: $("date").value.trim(), start, minutes: Number($("minutes").value),
                title: $("title").value.trim(), people: people()};
  const resp = await fetch("/api/meetings", {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
  });
  const data = await resp.json();
  if (!resp.ok) return showError(data.error || "Could not book.");
  await loadMeetings();
  await find();
}

$("find").addEventListener("click", find);
loadMeetings();
