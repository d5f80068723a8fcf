// Per-stream telemetry in fixed-size ring buffers (Float64Array, NaN = no sample).
//
// Time is cut in slots of `dt` seconds (0.5 s: the agents sample at 2 Hz); the store
// keeps the last `windowSeconds` of slots for every stream and every metric, so its
// memory is fixed by (streams x metrics x slots) however long the transfer runs. A
// stream's samples are accepted in time order only, so the history fetched from
// /streams and the live feed can overlap without counting a sample twice.

export const METRICS = ['bps', 'cwnd', 'rtt', 'cap', 'retrans'];

/**
 * @typedef {{leg: number, copy_id: string, stream: string, path: string | null,
 *   time: number, bits_per_second: number | null, snd_cwnd: number | null,
 *   rtt: number | null, rttvar: number | null, retransmits: number | null,
 *   cap: number | null, busy?: number | null, rwnd_limited?: number | null,
 *   sndbuf_limited?: number | null}} Sample
 * @typedef {{key: string, index: number, label: string, leg: number, path: string | null,
 *   cols: Record<string, Float64Array>, last: Sample | null, lastTime: number,
 *   retransmits: number, samples: number}} Stream
 */

export class TelemetryStore {
  constructor({ windowSeconds = 600, dt = 0.5, maxStreams = 1024 } = {}) {
    this.dt = dt;
    this.size = Math.ceil(windowSeconds / dt);
    this.maxStreams = maxStreams;
    /** @type {Map<string, Stream>} */ this.streams = new Map();
    /** @type {Stream[]} */ this.list = [];
    this.head = -Infinity; // newest slot (absolute)
    this.first = Infinity; // oldest slot ever written
    this.points = 0; // samples accepted
    this.version = 0; // bumped on every change
  }

  /** @param {Sample} s */
  add(s) {
    if (typeof s.time !== 'number') return;
    const slot = Math.floor(s.time / this.dt);
    if (slot > this.head) this.advance(slot);
    if (slot <= this.head - this.size) return; // older than the window
    const stream = this.stream(s);
    if (!stream || s.time <= stream.lastTime) return;
    const at = slot % this.size;
    const c = stream.cols;
    c.bps[at] = s.bits_per_second ?? NaN;
    c.cwnd[at] = s.snd_cwnd ?? NaN;
    c.rtt[at] = s.rtt === null || s.rtt === undefined ? NaN : s.rtt / 1000; // ms
    c.cap[at] = s.cap ?? NaN;
    c.retrans[at] = s.retransmits ?? NaN;
    stream.last = s;
    stream.lastTime = s.time;
    stream.path = s.path ?? stream.path;
    stream.retransmits += s.retransmits ?? 0;
    stream.samples += 1;
    this.first = Math.min(this.first, slot);
    this.points += 1;
    this.version += 1;
  }

  /** Clears the slots between the old head and `slot` (they are reused). */
  advance(/** @type {number} */ slot) {
    if (this.head !== -Infinity) {
      const from = Math.max(this.head + 1, slot - this.size + 1);
      for (let k = from; k <= slot; k++) {
        const at = k % this.size;
        for (const stream of this.list) for (const m of METRICS) stream.cols[m][at] = NaN;
      }
    }
    this.head = slot;
  }

  /** @param {Sample} s @returns {Stream | null} */
  stream(s) {
    const key = `${s.copy_id}/${s.stream}`;
    let stream = this.streams.get(key);
    if (stream) return stream;
    if (this.streams.size >= this.maxStreams) return null;
    /** @type {Record<string, Float64Array>} */
    const cols = {};
    for (const m of METRICS) cols[m] = new Float64Array(this.size).fill(NaN);
    stream = {
      key,
      index: 0,
      label: `leg ${s.leg} · stream ${s.stream}`,
      leg: s.leg,
      path: s.path ?? null,
      cols,
      last: null,
      lastTime: -Infinity,
      retransmits: 0,
      samples: 0,
    };
    this.streams.set(key, stream);
    this.list.push(stream);
    this.list.sort((a, b) => a.leg - b.leg || compareIds(a.key, b.key));
    this.list.forEach((x, i) => {
      x.index = i;
    });
    return stream;
  }

  /** The slots shown: from the oldest kept to the newest. */
  range() {
    if (this.head === -Infinity) return { from: 0, to: -1 };
    return { from: Math.max(this.first, this.head - this.size + 1), to: this.head };
  }

  /** Time (seconds) of the newest slot's end, or null before any sample. */
  newestTime() {
    return this.head === -Infinity ? null : (this.head + 1) * this.dt;
  }
}

/** "copy/10" after "copy/9". @param {string} a @param {string} b */
function compareIds(a, b) {
  return a.localeCompare(b, undefined, { numeric: true });
}

/**
 * Fills plain arrays (reused between frames: uPlot wants null for gaps, which typed
 * arrays cannot hold) with the slots of `range` for one metric.
 */
export class Frame {
  constructor() {
    /** @type {number[]} */ this.x = [];
    /** @type {(number | null)[][]} */ this.ys = [];
  }

  /** The times of the slots shown (this frame's own x array). @param {TelemetryStore} store */
  times(store) {
    const { from, to } = store.range();
    const n = Math.max(0, to - from + 1);
    this.x.length = n;
    for (let i = 0; i < n; i++) this.x[i] = (from + i) * store.dt;
    return this.x;
  }

  /**
   * @param {TelemetryStore} store @param {string} metric
   * @returns {[number[], ...(number | null)[][]]}
   */
  build(store, metric) {
    const { from } = store.range();
    const n = this.times(store).length;
    this.ys.length = store.list.length;
    store.list.forEach((stream, j) => {
      const y = (this.ys[j] ||= []);
      y.length = n;
      const col = stream.cols[metric];
      for (let i = 0; i < n; i++) {
        const v = col[(from + i) % store.size];
        y[i] = Number.isNaN(v) ? null : v;
      }
    });
    return [this.x, ...this.ys];
  }

  /**
   * The sum over streams per slot, each stream's last value carried over up to
   * `carry` slots (streams sample at slightly different instants).
   * @param {TelemetryStore} store @param {string} metric @param {number} [carry]
   */
  sum(store, metric, carry = 4) {
    const { from, to } = store.range();
    const n = Math.max(0, to - from + 1);
    /** @type {(number | null)[]} */ const total = new Array(n).fill(null);
    for (const stream of store.list) {
      const col = stream.cols[metric];
      let last = NaN;
      let age = Infinity;
      for (let i = 0; i < n; i++) {
        const v = col[(from + i) % store.size];
        if (!Number.isNaN(v)) {
          last = v;
          age = 0;
        } else {
          age += 1;
        }
        if (age <= carry && !Number.isNaN(last)) total[i] = (total[i] ?? 0) + last;
      }
    }
    return total;
  }
}
