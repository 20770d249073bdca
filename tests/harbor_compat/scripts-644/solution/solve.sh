#!/bin/bash
echo ok > /app/status
