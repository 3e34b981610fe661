// The chooser: the page reads fine without it (the coverage table has every command).
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("kiln-data").textContent);
  var base = data.base_url || new URL(".", document.baseURI).href;
  var $ = function (id) { return document.getElementById(id); };
  var torch = $("torch"), cuda = $("cuda"), python = $("python");
  var command = $("command"), commandUv = $("command-uv"), note = $("note");

  function absolute(page) { return new URL(page, base).href; }
  function cudaLabel(tag) {
    var m = /^cu(\d+)(\d)$/.exec(tag);
    return m ? "CUDA " + Number(m[1]) + "." + m[2] : tag.toUpperCase();
  }
  function find(t, c) {
    for (var i = 0; i < data.combos.length; i++) {
      if (data.combos[i].torch === t && data.combos[i].cuda === c) return data.combos[i];
    }
    return null;
  }
  function show(text, ok, uvText) {
    command.textContent = text;
    command.classList.toggle("unavailable", !ok);
    $("copy").hidden = !ok;
    commandUv.textContent = uvText || "";
    $("uv-box").hidden = !ok;
  }
  function update() {
    var combo = find(torch.value, cuda.value);
    var rows = document.querySelectorAll("#coverage tbody tr");
    for (var i = 0; i < rows.length; i++) {
      rows[i].classList.toggle("selected", rows[i].dataset.torch === torch.value && rows[i].dataset.cuda === cuda.value);
    }
    if (!combo) {
      var have = data.combos.filter(function (c) { return c.torch === torch.value; })
        .map(function (c) { return cudaLabel(c.cuda); });
      show("No wheel for PyTorch " + torch.value + " with " + cudaLabel(cuda.value) + ".", false);
      note.textContent = have.length ? "PyTorch " + torch.value + " has wheels for: " + have.join(", ") + "." : "";
      return;
    }
    var platforms = combo.pythons[python.value];
    if (!platforms) {
      show("No wheel for Python " + python.value + " with PyTorch " + combo.torch + " (" + cudaLabel(combo.cuda) + ").", false);
      note.textContent = "Python versions with a wheel here: " + Object.keys(combo.pythons).join(", ") + ".";
      return;
    }
    var url = absolute(combo.page);
    show("python" + python.value + " -m pip install " + data.project + " -f " + url, true,
      "uv pip install --python " + python.value + " " + data.project + " -f " + url);
    var first = "Needs PyTorch " + combo.torch + " (" + cudaLabel(combo.cuda) + " build) installed first";
    if (data.torch_index) {
      first += ": python" + python.value + " -m pip install \"torch==" + combo.torch + ".*\" --index-url " +
        data.torch_index.replace("{variant}", combo.cuda);
    }
    note.textContent = first + ". Wheels for " + platforms.join(", ") + ".";
  }

  var cmds = document.querySelectorAll("code.cmd[data-page]");
  for (var i = 0; i < cmds.length; i++) {
    cmds[i].textContent = "pip install " + data.project + " -f " + absolute(cmds[i].dataset.page);
  }
  [torch, cuda, python].forEach(function (el) { el.addEventListener("change", update); });
  $("copy").addEventListener("click", function () {
    var text = command.textContent;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text);
    } else {
      var range = document.createRange();
      range.selectNodeContents(command);
      window.getSelection().removeAllRanges();
      window.getSelection().addRange(range);
      document.execCommand("copy");
    }
    $("copy").textContent = "Copied";
    setTimeout(function () { $("copy").textContent = "Copy"; }, 1200);
  });
  if (data.combos.length) {
    var first = data.combos[0];
    torch.value = first.torch;
    cuda.value = first.cuda;
    python.value = Object.keys(first.pythons)[0] || python.value;
  }
  $("chooser").hidden = false;
  update();
})();
