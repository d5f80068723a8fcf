// Units as the dashboard shows them: bytes in binary units, rates in bits per second.

const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/** @param {number | null | undefined} n */
export function bytes(n) {
  if (n === null || n === undefined || !Number.isFinite(n)) return '–';
  let i = 0;
  while (Math.abs(n) >= 1024 && i < BYTE_UNITS.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${n.toFixed(i && Math.abs(n) < 10 ? 1 : 0)} ${BYTE_UNITS[i]}`;
}

/** Bits per second. @param {number | null | undefined} bps */
export function rate(bps) {
  if (bps === null || bps === undefined || !Number.isFinite(bps)) return '–';
  const units = ['bit/s', 'kbit/s', 'Mbit/s', 'Gbit/s', 'Tbit/s'];
  let i = 0;
  while (Math.abs(bps) >= 1000 && i < units.length - 1) {
    bps /= 1000;
    i += 1;
  }
  return `${bps.toFixed(Math.abs(bps) < 10 && i ? 1 : 0)} ${units[i]}`;
}

/** Short axis labels for rates. @param {number} bps */
export function rateShort(bps) {
  if (!Number.isFinite(bps)) return '';
  if (bps >= 1e9) return `${+(bps / 1e9).toFixed(2)}G`;
  if (bps >= 1e6) return `${+(bps / 1e6).toFixed(1)}M`;
  if (bps >= 1e3) return `${+(bps / 1e3).toFixed(0)}k`;
  return `${+bps.toFixed(0)}`;
}

/** Seconds as "1h 02m", "3m 05s", "12s". @param {number | null | undefined} s */
export function duration(s) {
  if (s === null || s === undefined || !Number.isFinite(s) || s < 0) return '–';
  s = Math.round(s);
  const hours = Math.floor(s / 3600);
  const minutes = Math.floor((s % 3600) / 60);
  const seconds = s % 60;
  if (hours) return `${hours}h ${String(minutes).padStart(2, '0')}m`;
  if (minutes) return `${minutes}m ${String(seconds).padStart(2, '0')}s`;
  return `${seconds}s`;
}

/** An ISO time as local "YYYY-MM-DD HH:MM:SS". @param {string | null | undefined} iso */
export function when(iso) {
  if (!iso) return '–';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  const pad = (/** @type {number} */ x) => String(x).padStart(2, '0');
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
  );
}

/** @param {number} done @param {number} total */
export function percent(done, total) {
  return total > 0 ? Math.min(100, (100 * done) / total) : 0;
}

/** A short id for tables: the first 8 characters. @param {string} id */
export function shortId(id) {
  return id.length > 8 ? id.slice(0, 8) : id;
}

/**
 * Rate of progress from successive looks at done_bytes (exponential moving average).
 */
export class RateMeter {
  constructor(alpha = 0.35) {
    this.alpha = alpha;
    /** @type {number | null} */ this.bps = null;
    /** @type {{t: number, done: number} | null} */ this.last = null;
  }

  /**
   * A new look at done_bytes; a smaller value than the last (two sources a moment
   * apart) is ignored. @param {number} done bytes @param {number} [t] seconds
   */
  update(done, t = performance.now() / 1000) {
    const last = this.last;
    if (!last) {
      this.last = { t, done };
    } else if (done > last.done && t > last.t + 0.2) {
      const now = ((done - last.done) * 8) / (t - last.t);
      this.bps = this.bps === null ? now : this.alpha * now + (1 - this.alpha) * this.bps;
      this.last = { t, done };
    } else if (t - last.t > 5) {
      this.bps = 0; // no progress for 5 s
    }
    return this.bps;
  }

  /** Seconds until `total` at the current rate. @param {number} done @param {number} total */
  eta(done, total) {
    if (!this.bps || this.bps <= 0 || done >= total) return null;
    return ((total - done) * 8) / this.bps;
  }
}

/**
 * How a transfer is verified, as its settings line says it: "on (storage)",
 * "on (receipt)" or "off" (a transfer from before the mode: storage).
 * @param {{ verify: boolean, verification?: string }} t
 */
export function verification(t) {
  return t.verify ? `on (${t.verification ?? 'storage'})` : 'off';
}

/**
 * What watched a verified leg's source while it was copied, from the leg's copy
 * summary: "" for a leg not verified (its copy claims nothing about the source).
 * @param {{ verified?: boolean, source_watched?: string, source_rehashed?: boolean }} s
 */
export function sourceWatch(s) {
  if (s.verified !== true) return '';
  if (s.source_rehashed) return 'source written during the copy, then hashed again at the end: equal to what was sent';
  return s.source_watched ? `source unchanged throughout (by ${s.source_watched})` : 'source not watched for changes';
}


/**
 * What each leg of transfer `t` that is not done went through, a line each: a leg the
 * coordinator resumes once its target answers again (running, with the error that
 * stopped its copy), or a failed or paused one with its error.
 * @param {any} t @returns {string[]}
 */
export function legTroubles(t) {
  return (t.legs ?? [])
    .filter((/** @type {any} */ l) => l.last_error && l.state !== 'completed')
    .map((/** @type {any} */ l) =>
      l.state === 'running'
        ? `leg ${l.index}: waiting to be resumed (${l.last_error})`
        : `leg ${l.index} ${l.state}: ${l.last_error}`,
    );
}

/**
 * When a leg's destination was not held while its copy wrote it (a target that
 * restarted, another initiator's CLEAR), from the copy summary: "" where it was held
 * throughout, or never held.
 * @param {{ hold?: string, hold_lapses?: string[] }} s
 */
export function holdLapses(s) {
  const lapses = s.hold_lapses ?? [];
  if (!s.hold || !lapses.length) return '';
  return `destination ${lapses.length === 1 ? 'hold' : 'holds'} lost for a time (other initiators could write then): ${lapses.join('; ')}`;
}
