/**
 * Which network addresses outbound requests may reach: only public (global unicast)
 * addresses, unless the operator's allow-list (`WEBHOOK_ALLOWED_CIDRS`) admits a range.
 * Loopback, private, link-local (cloud metadata 169.254.169.254 included), CGNAT,
 * multicast, unspecified, reserved and the IPv6 equivalents are refused.
 *
 * IPv6 addresses that carry an IPv4 address:
 * - IPv4-mapped (`::ffff:0:0/96`) and NAT64 with the well-known prefix (`64:ff9b::/96`)
 *   are judged as the IPv4 address they carry: they are how a dual-stack socket or a
 *   DNS64/NAT64 network reaches IPv4 hosts, so `64:ff9b::8.8.8.8` is public and
 *   `64:ff9b::127.0.0.1` is not.
 * - IPv4-compatible (`::/96`, deprecated), IPv4-translated (`::ffff:0:0:0/96`), local-use
 *   NAT64 (`64:ff9b:1::/48`), 6to4 (`2002::/16`) and Teredo (`2001::/32`) are never
 *   public: refused whatever they carry, unless the allow-list admits them.
 * - An otherwise public address whose interface identifier has the ISATAP form
 *   (`…:0:5efe:a.b.c.d`, `…:200:5efe:a.b.c.d`) is refused when the IPv4 address it
 *   carries is not public.
 * NAT64 prefixes an operator chose for their own network cannot be recognised; list
 * them nowhere and they stay refused unless they are global addresses.
 * The policy as operators and users see it: docs/security.md#6-outbound-requests-and-the-ssrf-policy.
 */
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

type Address = ipaddr.IPv4 | ipaddr.IPv6;
type Range = [Address, number];

const NAT64_WELL_KNOWN: [ipaddr.IPv6, number] = [ipaddr.IPv6.parse('64:ff9b::'), 96];

export class AddressPolicy {
  private readonly allowed: Range[];

  /** Throws on a malformed CIDR, so a bad allow-list (`setting`: its variable) stops start-up. */
  constructor(
    allowedCidrs: readonly string[],
    readonly setting = 'WEBHOOK_ALLOWED_CIDRS',
  ) {
    this.allowed = allowedCidrs.map((cidr) => {
      try {
        const [address, bits] = ipaddr.parseCIDR(cidr);
        return [normalise(address), address.kind() === 'ipv6' && normalise(address).kind() === 'ipv4' ? bits - 96 : bits];
      } catch {
        throw new Error(`${setting}: "${cidr}" is not a CIDR such as 10.0.0.0/8 or ::1/128`);
      }
    });
  }

  /** Whether `ip` (an IP literal) may be connected to; a non-IP string never may. */
  permits(ip: string): boolean {
    if (!ipaddr.isValid(ip)) return false;
    if (this.allowListed(ip)) return true;
    return classify(ipaddr.parse(ip)) === 'public';
  }

  /** Whether the operator's allow-list itself admits `ip` (not merely its being public). */
  allowListed(ip: string): boolean {
    if (!ipaddr.isValid(ip)) return false;
    const address = normalise(ipaddr.parse(ip));
    return this.allowed.some(([range, bits]) => range.kind() === address.kind() && address.match(range, bits));
  }

  /**
   * What kind of address `ip` is, for the server log only (`10.0.0.1 (private)`): tenant
   * users are told no more than that a destination is not allowed.
   */
  describe(ip: string): string {
    return `${ip} (${ipaddr.isValid(ip) ? classify(ipaddr.parse(ip)) : 'not an IP address'})`;
  }
}

/** The IPv4 address in the 32 bits starting at 16-bit word `word` of an IPv6 address. */
function ipv4At(address: ipaddr.IPv6, word: number): ipaddr.IPv4 {
  const high = address.parts[word]!;
  const low = address.parts[word + 1]!;
  return new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff]);
}

/**
 * `public` for an address outbound requests may reach without the allow-list; otherwise
 * the name of its range (`loopback`, `private`, `ipv4Compatible`, `6to4`, …).
 */
export function classify(input: Address): string {
  const address = normalise(input);
  if (address.kind() === 'ipv4') {
    const range = address.range();
    return range === 'unicast' ? 'public' : range;
  }
  const v6 = address as ipaddr.IPv6;
  const range = v6.range();
  if (range === 'unspecified' || range === 'loopback') return range;
  if (v6.parts.slice(0, 6).every((part) => part === 0)) return 'ipv4Compatible';
  if (v6.match(NAT64_WELL_KNOWN)) {
    const carried = classify(ipv4At(v6, 6));
    return carried === 'public' ? 'public' : `nat64 of ${carried}`;
  }
  if (range !== 'unicast') return range;
  const [u, isatap] = [v6.parts[4]!, v6.parts[5]!];
  if ((u & 0xfcff) === 0 && isatap === 0x5efe) {
    const carried = classify(ipv4At(v6, 6));
    if (carried !== 'public') return `isatap of ${carried}`;
  }
  return 'public';
}

/** IPv4-mapped IPv6 (`::ffff:127.0.0.1`) is judged as the IPv4 address it carries. */
function normalise(address: Address): Address {
  return address.kind() === 'ipv6' && (address as ipaddr.IPv6).isIPv4MappedAddress() ? (address as ipaddr.IPv6).toIPv4Address() : address;
}

/** An IP literal from a URL host (`[::1]` → `::1`), or null for a host name. */
export function ipLiteral(host: string): string | null {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  return isIP(bare) !== 0 ? bare : null;
}
