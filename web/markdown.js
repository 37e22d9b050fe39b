// markdown.js - the small, safe Markdown renderer of kiln's chat page.
//
// Model output is untrusted text, so the renderer never passes any of it through as HTML: every
// piece of input is HTML-escaped first, and only tags this file writes itself are added around the
// escaped text. Links are made only for http:// and https:// addresses (so no javascript: or data:
// URLs), and open in a new tab without a referrer. Supported: ATX headings (#), paragraphs (single
// newlines kept as line breaks), **bold** / __bold__, *italic* / _italic_, ~~strike~~, `inline
// code`, fenced code blocks (``` or ~~~, with a language label; an unclosed fence, as while a reply
// is still streaming, runs to the end), bulleted and numbered lists (nested by indentation),
// > block quotes, horizontal rules, [links](https://...) and bare https:// addresses. Anything
// else stays plain text.

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

// Escapes the five characters that matter in HTML text and attribute values.
export function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ESC[c]);
}

const FENCE = /^ {0,3}(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])[ \t]+(.*)$/;
const BLANK = /^[ \t]*$/;

// Renders Markdown source to an HTML string that is safe to assign to innerHTML.
export function renderMarkdown(src) {
  const lines = String(src ?? '').replace(/\u0000/g, '').replace(/\r\n?/g, '\n').split('\n');
  return blocks(lines, 0).join('\n');
}

// The block structure of lines (depth limits the nesting of quotes and lists).
function blocks(lines, depth) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (BLANK.test(line)) {
      i++;
    } else if ((m = FENCE.exec(line))) {
      const mark = m[1];
      const body = [];
      i++;
      while (i < lines.length && !isClosingFence(lines[i], mark)) body.push(lines[i++]);
      i++; // the closing fence (or past the end)
      out.push(codeBlock(body.join('\n'), m[2]));
    } else if ((m = HEADING.exec(line))) {
      const n = m[1].length;
      out.push(`<h${n}>${inline(m[2])}</h${n}>`);
      i++;
    } else if (RULE.test(line)) {
      out.push('<hr>');
      i++;
    } else if (QUOTE.test(line) && depth < 8) {
      const inner = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        inner.push(m[1]);
        i++;
      }
      out.push(`<blockquote>${blocks(inner, depth + 1).join('\n')}</blockquote>`);
    } else if (ITEM.test(line) && depth < 8) {
      i = list(lines, i, depth, out);
    } else {
      const para = [];
      while (i < lines.length && !BLANK.test(lines[i]) && !startsBlock(lines[i])) para.push(lines[i++].trim());
      if (!para.length) para.push(lines[i++].trim()); // a line that only looked like a block start
      out.push(`<p>${para.map(inline).join('<br>')}</p>`);
    }
  }
  return out;
}

function isClosingFence(line, mark) {
  const t = line.trim();
  return t.length >= mark.length && t[0] === mark[0] && /^(`+|~+)$/.test(t) && line.search(/\S/) <= 3;
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);
}

// A list starting at lines[i]: items of the same kind (bullets or numbers) at the same indentation,
// each with the lines indented under it (rendered as nested blocks). Returns the next line index.
function list(lines, i, depth, out) {
  const first = ITEM.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const start = ordered ? parseInt(first[2], 10) : 1;
  const items = [];
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
    const body = [m[3]];
    i++;
    // continuation: indented deeper than the marker, or blank lines followed by such lines
    while (i < lines.length) {
      if (BLANK.test(lines[i])) {
        let j = i;
        while (j < lines.length && BLANK.test(lines[j])) j++;
        if (j < lines.length && leading(lines[j]) > indent) {
          while (i < j) body.push(lines[i++].trim());
          continue;
        }
        break;
      }
      const lead = leading(lines[i]);
      if (lead <= indent && startsBlock(lines[i])) break; // the next item, or another block
      // deeper lines belong to the item (nested lists keep their relative indentation); a line
      // at the item's own indentation continues its paragraph
      body.push(lead > indent ? lines[i].slice(Math.min(lead, indent + 2)) : lines[i].trim());
      i++;
    }
    items.push(body);
    // a blank line between items keeps the list going
    let j = i;
    while (j < lines.length && BLANK.test(lines[j])) j++;
    const next = j < lines.length ? ITEM.exec(lines[j]) : null;
    if (next && next[1].length === indent && /\d/.test(next[2]) === ordered) i = j;
  }
  const tag = ordered ? 'ol' : 'ul';
  const attr = ordered && start !== 1 ? ` start="${start}"` : '';
  const lis = items.map((body) => {
    const inner = blocks(body, depth + 1);
    // the item's first paragraph renders without its <p>
    if (inner.length && inner[0].startsWith('<p>')) inner[0] = inner[0].slice(3, -4);
    return `<li>${inner.join('\n')}</li>`;
  });
  out.push(`<${tag}${attr}>${lis.join('')}</${tag}>`);
  return i;
}

function leading(line) {
  return line.length - line.trimStart().length;
}

function codeBlock(code, lang) {
  const label = lang ? escapeHtml(lang) : 'code';
  const cls = lang ? ` class="language-${escapeHtml(lang)}"` : '';
  return `<div class="code"><div class="code-head"><span>${label}</span>` +
    '<button type="button" class="copy" title="Copy the code">Copy</button></div>' +
    `<pre><code${cls}>${escapeHtml(code)}</code></pre></div>`;
}

// Inline formatting of one line of text. Code spans and links are cut out into numbered
// placeholders (\u0000N\u0000; the input holds no NUL) before emphasis runs over the rest.
function inline(text) {
  const held = [];
  const hold = (html) => `\u0000${held.push(html) - 1}\u0000`;
  let s = text.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_, ticks, code) => hold(`<code>${escapeHtml(code)}</code>`));
  s = escapeHtml(s);
  // [label](http(s)://...): the address is already escaped, so it cannot leave the attribute
  s = s.replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s()<>]+)\)/g, (_, label, url) => hold(link(url, emphasis(label))));
  // bare addresses, without trailing punctuation and without escaped quotes or brackets
  s = s.replace(/\bhttps?:\/\/(?:(?!&(?:quot|lt|gt|#39);)[^\s\u0000])+/g, (url) => {
    const m = /^(.*?)((?:[.,:;!?)\]]|&amp;)*)$/.exec(url);
    return hold(link(m[1], m[1])) + m[2];
  });
  s = emphasis(s);
  return s.replace(/\u0000(\d+)\u0000/g, (_, n) => held[Number(n)]);
}

function link(url, label) {
  return `<a href="${url}" target="_blank" rel="noopener noreferrer">${label}</a>`;
}

// Bold, italic and strike-through on escaped text (the markers are not HTML-special).
function emphasis(s) {
  return s
    .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>')
    .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>')
    .replace(/(^|[^*\w])\*([^\s*](?:[^*]*?[^\s*])?)\*(?![*\w])/g, '$1<em>$2</em>')
    .replace(/(^|[^\w])_([^\s_](?:[^_]*?[^\s_])?)_(?!\w)/g, '$1<em>$2</em>')
    .replace(/~~(?=\S)([\s\S]*?\S)~~/g, '<del>$1</del>');
}
