// dsflow web page: the lineage graph as SVG, laid out in layers by longest path (no libraries). Used by app.js.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const NODE_W = 250, NODE_H = 44, GAP_X = 70, GAP_Y = 18, PAD = 12;

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function layers(nodes, edges) {
  // longest path from a source node: layer(n) = 1 + max(layer(predecessor)); Kahn's order, cycles left at 0
  const preds = new Map(nodes.map((n) => [n.id, []]));
  const succs = new Map(nodes.map((n) => [n.id, []]));
  edges.filter((e) => preds.has(e.source) && preds.has(e.target)).forEach((e) => {
    preds.get(e.target).push(e.source); succs.get(e.source).push(e.target);
  });
  const indegree = new Map(nodes.map((n) => [n.id, preds.get(n.id).length]));
  const layer = new Map(nodes.map((n) => [n.id, 0]));
  const queue = nodes.filter((n) => indegree.get(n.id) === 0).map((n) => n.id);
  while (queue.length) {
    const id = queue.shift();
    for (const next of succs.get(id)) {
      layer.set(next, Math.max(layer.get(next), layer.get(id) + 1));
      indegree.set(next, indegree.get(next) - 1);
      if (indegree.get(next) === 0) queue.push(next);
    }
  }
  return {layer, preds};
}

function positions(nodes, edges) {
  const {layer, preds} = layers(nodes, edges);
  const columns = [];
  nodes.forEach((n) => { (columns[layer.get(n.id)] ||= []).push(n); });
  const place = new Map();
  columns.forEach((column, x) => {
    // order each layer by the mean row of its predecessors (fewer crossings), then by label
    const key = (n) => {
      const rows = preds.get(n.id).filter((p) => place.has(p)).map((p) => place.get(p).row);
      return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : Infinity;
    };
    column.sort((a, b) => (key(a) - key(b)) || (a.label || a.id).localeCompare(b.label || b.id));
    column.forEach((n, row) => place.set(n.id, {col: x, row,
      x: PAD + x * (NODE_W + GAP_X), y: PAD + row * (NODE_H + GAP_Y)}));
  });
  return {place, cols: columns.length, rows: Math.max(1, ...columns.map((c) => (c || []).length))};
}

/** Draw `lineage` ({nodes, edges}) into `container`; each node is a link (Tab, Enter) calling `onSelect(node)`,
 *  named for screen readers by `label(node)`. Arrow keys move the focus along the graph: Right to a node it
 *  feeds, Left to a node that feeds it (the nearest row first), Up and Down within its layer, Home and End to
 *  the first and last node. */
function drawLineage(container, lineage, {onSelect, label}) {
  const nodes = lineage.nodes || [], edges = lineage.edges || [];
  const {place, cols, rows} = positions(nodes, edges);
  const width = PAD * 2 + Math.max(1, cols) * (NODE_W + GAP_X) - GAP_X;
  const height = PAD * 2 + rows * (NODE_H + GAP_Y) - GAP_Y;
  const root = svg("svg", {width, height, viewBox: `0 0 ${width} ${height}`, role: "group",
                           "aria-label": `Lineage graph: ${nodes.length} nodes, ${edges.length} edges`});
  root.append(arrowMarker());
  for (const edge of edges) {
    const a = place.get(edge.source), b = place.get(edge.target);
    if (!a || !b) continue;
    const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x - 4, y2 = b.y + NODE_H / 2, mid = (x1 + x2) / 2;
    root.append(svg("path", {d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`, class: "edge",
                             "marker-end": "url(#arrow)", "aria-hidden": "true"}));
  }
  // document order = Tab order: layer by layer (left to right), top to bottom within a layer
  const order = (n) => [place.get(n.id).col, place.get(n.id).row];
  const sorted = [...nodes].sort((a, b) => order(a)[0] - order(b)[0] || order(a)[1] - order(b)[1]);
  const links = new Map();
  for (const node of sorted) {
    const link = graphNode(node, place.get(node.id), onSelect, label);
    links.set(node.id, link);
    root.append(link);
  }
  root.addEventListener("keydown", (event) => {
    const id = event.target.closest && event.target.closest("a.node")?.dataset.id;
    const next = id && neighbour(id, event.key, place, edges, sorted);
    if (!next || !links.has(next)) return;
    event.preventDefault();
    links.get(next).focus();
  });
  container.replaceChildren(root);
  if (!nodes.length) {
    const empty = document.createElement("p");
    empty.className = "muted";
    empty.textContent = "Nothing you may see is deployed.";
    container.append(empty);
  }
}

function neighbour(id, key, place, edges, sorted) {
  // the node an arrow key moves to from `id`, or undefined
  const at = place.get(id);
  const nearest = (ids) => ids.filter((n) => place.has(n))
    .sort((a, b) => Math.abs(place.get(a).row - at.row) - Math.abs(place.get(b).row - at.row)
                    || place.get(a).row - place.get(b).row)[0];
  const inColumn = (row) => sorted.find((n) => place.get(n.id).col === at.col && place.get(n.id).row === row)?.id;
  switch (key) {
    case "ArrowRight": return nearest(edges.filter((e) => e.source === id).map((e) => e.target));
    case "ArrowLeft": return nearest(edges.filter((e) => e.target === id).map((e) => e.source));
    case "ArrowDown": return inColumn(at.row + 1);
    case "ArrowUp": return inColumn(at.row - 1);
    case "Home": return sorted[0]?.id;
    case "End": return sorted[sorted.length - 1]?.id;
    default: return undefined;
  }
}

function arrowMarker() {
  const defs = svg("defs");
  const marker = svg("marker", {id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7",
                                markerHeight: "7", orient: "auto-start-reverse"});
  marker.append(svg("path", {d: "M0,0 L10,5 L0,10 z", class: "arrow"}));
  defs.append(marker);
  return defs;
}

function graphNode(node, at, onSelect, describe) {
  const label = node.label || node.id;
  const link = svg("a", {href: `#${encodeURIComponent(node.id)}`, class: `node kind-${node.kind}`,
                         "data-id": node.id, "aria-label": describe(node)});
  link.append(svg("rect", {x: at.x, y: at.y, width: NODE_W, height: NODE_H, rx: 6}));
  const kind = svg("text", {x: at.x + 8, y: at.y + 15, class: "node-kind"});
  kind.textContent = node.kind + (node.state ? ` · ${node.state}` : "");
  const text = svg("text", {x: at.x + 8, y: at.y + 33, class: "node-label"});
  text.textContent = label.length > 33 ? `${label.slice(0, 32)}…` : label;
  const title = svg("title");
  title.textContent = node.id;
  link.append(title, kind, text);
  link.addEventListener("click", (event) => { event.preventDefault(); onSelect(node); });
  return link;
}
