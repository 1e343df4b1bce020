# Builds the single jobgate binary (dev, serve, worker, token).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/jobgate ./cmd/jobgate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/jobgate /jobgate
ENTRYPOINT ["/jobgate"]
